package kernels

import (
	"fmt"
	"math"
)

// Attention over a KV cache stored below float32 (docs/kv-cache.md). Two
// row formats:
//
//   - Q8: int8 values with one float32 scale per group of Group consecutive
//     values of a row; value i of a row is float32(q[i]) · scale[i/Group]
//     (one rounded multiply, never fused). Group divides the head width.
//   - BF16: the upper half of a float32; widening is exact.
//
// The kernels widen a tile of attendTile cached rows of one KV head into a
// float32 scratch, then run the float32 attention code over it. A tile of
// rows is all that is ever widened: no float32 copy of the cache exists.
// So AttendScoresQ8 / AttendScoresBF16 give bitwise what AttendScores gives
// over the widened rows, and AttendValuesQ8 / AttendValuesBF16 what
// AttendValues gives (the same ascending-position chain per column), on
// every CPU and with or without assembly.

// Q8Rows is a cache of int8 rows: Values holds rows of Stride values,
// Scales rows of Stride/Group scales. Pass slices that start at a KV head's
// first value (and its first group's scale); the strides stay the row's.
type Q8Rows struct {
	Values []int8
	Scales []float32
	Stride int // values per row
	Group  int // values per scale
}

// BF16Rows is a cache of bfloat16 rows (the high 16 bits of a float32) of
// Stride values each, starting at a KV head's first value.
type BF16Rows struct {
	Values []uint16
	Stride int
}

// AttendScratch is the scratch length the Q8 and BF16 attention kernels
// need for heads query heads of width d: one widened tile of rows and the
// tile's scores.
func AttendScratch(heads, d int) int { return attendTile*d + heads*attendTile }

// QuantizeQ8 writes x as int8 values and one scale per group of len(scales)
// dividing len(x): scale = max|x|/127 over the group (0 for an all-zero
// group), q = x/scale rounded to nearest, ties away from zero. NaN and
// infinities are not representable and saturate; a cache row is never
// either after RMSNorm.
func QuantizeQ8(dst []int8, scales []float32, x []float32) {
	if len(dst) != len(x) || len(scales) == 0 || len(x)%len(scales) != 0 {
		panic(fmt.Sprintf("kernels.QuantizeQ8: %d values into %d int8 with %d scales", len(x), len(dst), len(scales)))
	}
	group := len(x) / len(scales)
	for g := range scales {
		xs := x[g*group : (g+1)*group]
		var amax float32
		for _, v := range xs {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		s := amax / 127
		scales[g] = s
		out := dst[g*group : (g+1)*group]
		if s == 0 || math.IsInf(float64(s), 0) || s != s {
			clear(out)
			continue
		}
		inv := 1 / float64(s)
		for i, v := range xs {
			r := math.Round(float64(v) * inv)
			out[i] = int8(max(-127, min(127, r)))
		}
	}
}

// ToBF16 rounds x to bfloat16, to nearest with ties to even (NaN stays NaN).
func ToBF16(dst []uint16, x []float32) {
	if len(dst) != len(x) {
		panic(fmt.Sprintf("kernels.ToBF16: %d values into %d", len(x), len(dst)))
	}
	for i, v := range x {
		b := math.Float32bits(v)
		if v != v {
			dst[i] = uint16(b>>16) | 0x40
			continue
		}
		b += 0x7FFF + (b>>16)&1
		dst[i] = uint16(b >> 16)
	}
}

// AttendScoresQ8 is AttendScores over Q8 key rows: scores[j·n+t] =
// (q_j·k_t)·scale with k_t the widened row t of keys (its first d values).
// scratch has AttendScratch(heads, d) values; qi is as for AttendScores.
func AttendScoresQ8(scores, q []float32, d int, keys Q8Rows, n int, scale float32, qi, scratch []float32) {
	checkQ8("AttendScoresQ8", d, keys, n)
	attendScoresTiled(scores, q, d, n, scale, qi, scratch, func(dst []float32, t0, rows int) {
		widenQ8(dst, keys, d, t0, rows)
	})
}

// AttendValuesQ8 is AttendValues over Q8 value rows.
func AttendValuesQ8(o, w []float32, d int, values Q8Rows, n int, scratch []float32) {
	checkQ8("AttendValuesQ8", d, values, n)
	attendValuesTiled(o, w, d, n, scratch, func(dst []float32, t0, rows int) {
		widenQ8(dst, values, d, t0, rows)
	})
}

// AttendScoresBF16 is AttendScores over bfloat16 key rows.
func AttendScoresBF16(scores, q []float32, d int, keys BF16Rows, n int, scale float32, qi, scratch []float32) {
	checkBF16("AttendScoresBF16", d, keys, n)
	attendScoresTiled(scores, q, d, n, scale, qi, scratch, func(dst []float32, t0, rows int) {
		widenBF16(dst, keys, d, t0, rows)
	})
}

// AttendValuesBF16 is AttendValues over bfloat16 value rows.
func AttendValuesBF16(o, w []float32, d int, values BF16Rows, n int, scratch []float32) {
	checkBF16("AttendValuesBF16", d, values, n)
	attendValuesTiled(o, w, d, n, scratch, func(dst []float32, t0, rows int) {
		widenBF16(dst, values, d, t0, rows)
	})
}

// attendScoresTiled scores the positions a tile at a time: widen fills
// dst [rows, d] with rows t0…t0+rows−1.
func attendScoresTiled(scores, q []float32, d, n int, scale float32, qi, scratch []float32, widen func(dst []float32, t0, rows int)) {
	heads := len(q) / d
	if d <= 0 || len(q)%d != 0 || len(scores) != heads*n || len(qi) != len(q) || len(scratch) < AttendScratch(heads, d) {
		panic(fmt.Sprintf("kernels.AttendScores: %d scores, %d query values of width %d, %d of scratch and %d of qi for %d positions", len(scores), len(q), d, len(scratch), len(qi), n))
	}
	tileRows, tileScores := scratch[:attendTile*d], scratch[attendTile*d:]
	asm := n > 0 && interleaveQueriesAsm(q, d, qi) // once, not per tile
	for t0 := 0; t0 < n; t0 += attendTile {
		rows := min(attendTile, n-t0)
		widen(tileRows[:rows*d], t0, rows)
		ts := tileScores[:heads*rows]
		if asm {
			attendScoresTileAsm(ts, qi, d, tileRows, rows, scale)
		} else {
			AttendScores(ts, q, d, tileRows, d, rows, scale, qi)
		}
		for j := range heads {
			copy(scores[j*n+t0:j*n+t0+rows], ts[j*rows:(j+1)*rows])
		}
	}
}

// attendValuesTiled accumulates the positions a tile at a time onto a
// cleared o, in ascending order, exactly as AttendValues does.
func attendValuesTiled(o, w []float32, d, n int, scratch []float32, widen func(dst []float32, t0, rows int)) {
	heads := len(o) / d
	if d <= 0 || len(o)%d != 0 || len(w) != heads*n || len(scratch) < attendTile*d {
		panic(fmt.Sprintf("kernels.AttendValues: %d outputs of width %d, %d weights, %d of scratch for %d positions", len(o), d, len(w), len(scratch), n))
	}
	tileRows := scratch[:attendTile*d]
	clear(o)
	for t0 := 0; t0 < n; t0 += attendTile {
		rows := min(attendTile, n-t0)
		widen(tileRows[:rows*d], t0, rows)
		if attendValuesAsm(o, w[t0:], n, d, tileRows, d, rows) {
			continue
		}
		for t := range rows {
			v := tileRows[t*d : (t+1)*d]
			for j := range heads {
				al := w[j*n+t0+t]
				row := o[j*d : (j+1)*d]
				for i, x := range v {
					row[i] += float32(al * x)
				}
			}
		}
	}
}

func checkQ8(fn string, d int, c Q8Rows, n int) {
	ok := d > 0 && n >= 0 && c.Stride >= d && c.Group > 0 && d%c.Group == 0 && c.Stride%c.Group == 0
	if ok && n > 0 {
		ok = len(c.Values) >= (n-1)*c.Stride+d && len(c.Scales) >= ((n-1)*c.Stride+d)/c.Group
	}
	if !ok {
		panic(fmt.Sprintf("kernels.%s: width %d over %d positions of %d int8 values (stride %d, group %d) and %d scales", fn, d, n, len(c.Values), c.Stride, c.Group, len(c.Scales)))
	}
}

func checkBF16(fn string, d int, c BF16Rows, n int) {
	if d <= 0 || n < 0 || c.Stride < d || (n > 0 && len(c.Values) < (n-1)*c.Stride+d) {
		panic(fmt.Sprintf("kernels.%s: width %d over %d positions of %d bf16 values (stride %d)", fn, d, n, len(c.Values), c.Stride))
	}
}

// widenQ8 writes rows t0…t0+rows−1 of c (their first d values) to dst
// [rows, d] as float32.
func widenQ8(dst []float32, c Q8Rows, d, t0, rows int) {
	gs := c.Stride / c.Group
	if widenQ8Asm(dst, c.Values[t0*c.Stride:], c.Stride, c.Scales[t0*gs:], gs, rows, d, c.Group) {
		return
	}
	for r := range rows {
		src := c.Values[(t0+r)*c.Stride:][:d]
		sc := c.Scales[(t0+r)*gs:]
		out := dst[r*d : (r+1)*d]
		for i, v := range src {
			out[i] = float32(v) * sc[i/c.Group]
		}
	}
}

// widenBF16 is widenQ8 for bfloat16 rows.
func widenBF16(dst []float32, c BF16Rows, d, t0, rows int) {
	if widenBF16Asm(dst, c.Values[t0*c.Stride:], c.Stride, rows, d) {
		return
	}
	for r := range rows {
		src := c.Values[(t0+r)*c.Stride:][:d]
		out := dst[r*d : (r+1)*d]
		for i, v := range src {
			out[i] = bf16ToF32(v)
		}
	}
}
