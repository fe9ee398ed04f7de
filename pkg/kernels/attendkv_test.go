package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// q8Cache quantizes n rows of stride values, group values per scale.
func q8Cache(x []float32, stride, group int) Q8Rows {
	c := Q8Rows{Values: make([]int8, len(x)), Scales: make([]float32, len(x)/group), Stride: stride, Group: group}
	for g := 0; g < len(x); g += group {
		QuantizeQ8(c.Values[g:g+group], c.Scales[g/group:g/group+1], x[g:g+group])
	}
	return c
}

// widenedQ8 is the float32 cache the Q8 kernels must behave as if they
// read: every value times its group's scale, written out in full here
// (the test's oracle, never the kernels' tiles).
func widenedQ8(c Q8Rows) []float32 {
	out := make([]float32, len(c.Values))
	for i, v := range c.Values {
		out[i] = float32(v) * c.Scales[i/c.Group]
	}
	return out
}

func widenedBF16(v []uint16) []float32 {
	out := make([]float32, len(v))
	for i, h := range v {
		out[i] = math.Float32frombits(uint32(h) << 16)
	}
	return out
}

// TestAttendKVBitwise: the Q8 and BF16 kernels give attendOracle's bits
// over the widened cache, with and without each assembly, for head counts
// in and out of twos and fours, widths in and out of the assembly's 16- and
// 64-column steps (8 and 32 for AVX2), position counts around the tile of
// 64, KV heads inside wider rows (offset into the row) and groups of 8, 16,
// 32, 64 and the whole head. Under the race detector (or -short), which
// slows this single-goroutine matrix 16 times and has nothing to race in
// it, the head counts are 1, 3 and 4 and the position counts 3 and 65 (all
// widths, rows and groups); scripts/test.sh runs it whole without -race.
func TestAttendKVBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	headCounts, positions := []int{1, 2, 3, 4, 6, 8}, []int{1, 3, 63, 64, 65, 130}
	if testfix.Quick(raceEnabled) {
		headCounts, positions = []int{1, 3, 4}, []int{3, 65}
	}
	for _, level := range floatAsmLevels() {
		restore := level.set()
		for _, heads := range headCounts {
			for _, d := range []int{8, 16, 24, 32, 48, 64, 96, 256} {
				for _, n := range positions {
					for _, kvHeads := range []int{1, 2} {
						for _, group := range []int{8, 16, 32, 64, d} {
							if d%group != 0 {
								continue
							}
							stride := kvHeads * d
							off := (kvHeads - 1) * d // the last KV head of the row
							name := fmt.Sprintf("%s/heads=%d/d=%d/n=%d/stride=%d/group=%d", level.name, heads, d, n, stride, group)
							checkAttendKV(t, rng, name, heads, d, n, stride, off, group)
						}
					}
				}
			}
		}
		restore()
	}
}

func checkAttendKV(t *testing.T, rng *rand.Rand, name string, heads, d, n, stride, off, group int) {
	t.Helper()
	q := randomVector(rng, heads*d)
	kf, vf := randomVector(rng, n*stride), randomVector(rng, n*stride)
	scale := float32(0.0625)
	scratch := make([]float32, AttendScratch(heads, d))
	qi := make([]float32, heads*d)
	w := randomVector(rng, heads*n) // any weights: AttendValues does not normalise

	kq, vq := q8Cache(kf, stride, group), q8Cache(vf, stride, group)
	wk := widenedQ8(kq)[off:]
	wantS, _ := attendOracle(q, d, wk, wk, stride, n, scale)
	scores := make([]float32, heads*n)
	AttendScoresQ8(scores, q, d, Q8Rows{kq.Values[off:], kq.Scales[off/group:], stride, group}, n, scale, qi, scratch)
	assertSameFloats(t, name+" q8 scores", scores, wantS)
	o := floatEdgeVector(rng, heads*d)
	AttendValuesQ8(o, w, d, Q8Rows{vq.Values[off:], vq.Scales[off/group:], stride, group}, n, scratch)
	assertSameFloats(t, name+" q8 values", o, valuesOracle(w, d, widenedQ8(vq)[off:], stride, n))

	kb, vb := make([]uint16, len(kf)), make([]uint16, len(vf))
	ToBF16(kb, kf)
	ToBF16(vb, vf)
	wb := widenedBF16(kb)[off:]
	wantS, _ = attendOracle(q, d, wb, wb, stride, n, scale)
	AttendScoresBF16(scores, q, d, BF16Rows{kb[off:], stride}, n, scale, qi, scratch)
	assertSameFloats(t, name+" bf16 scores", scores, wantS)
	AttendValuesBF16(o, w, d, BF16Rows{vb[off:], stride}, n, scratch)
	assertSameFloats(t, name+" bf16 values", o, valuesOracle(w, d, widenedBF16(vb)[off:], stride, n))
}

// valuesOracle is the value half of attendOracle for given weights.
func valuesOracle(w []float32, d int, values []float32, stride, n int) []float32 {
	heads := len(w) / n
	o := make([]float32, heads*d)
	for t := range n {
		for j := range heads {
			row, al := o[j*d:(j+1)*d], w[j*n+t]
			for i, x := range values[t*stride : t*stride+d] {
				row[i] += float32(al * x)
			}
		}
	}
	return o
}

// TestQuantizeQ8: every value comes back within half a step of its group's
// scale, the group's largest magnitude maps to ±127, and zero groups give
// zero scales.
func TestQuantizeQ8(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	x := randomVector(rng, 256)
	clear(x[64:128])
	q, s := make([]int8, 256), make([]float32, 4)
	QuantizeQ8(q, s, x)
	if s[1] != 0 {
		t.Errorf("zero group: scale %g", s[1])
	}
	for i, v := range x {
		back := float32(q[i]) * s[i/64]
		if d := math.Abs(float64(back - v)); d > float64(s[i/64])*0.5001 {
			t.Errorf("x[%d] = %g: back %g, off by %g > half of scale %g", i, v, back, d, s[i/64])
		}
	}
	for g := range 4 {
		if s[g] == 0 {
			continue
		}
		var top int8
		for _, v := range q[g*64 : (g+1)*64] {
			top = max(top, v, -v)
		}
		if top != 127 {
			t.Errorf("group %d: largest |q| %d, want 127", g, top)
		}
	}
}

// TestToBF16 checks rounding to nearest even on the cases that tell it
// from truncation.
func TestToBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3F800000, 0x3F80}, // 1
		{0x3F808000, 0x3F80}, // tie, even stays
		{0x3F818000, 0x3F82}, // tie, odd rounds up
		{0x3F808001, 0x3F81}, // above the tie
		{0x7F7FFFFF, 0x7F80}, // rounds to +Inf
		{0x80000000, 0x8000}, // -0
	} {
		var got [1]uint16
		ToBF16(got[:], []float32{math.Float32frombits(c.in)})
		if got[0] != c.want {
			t.Errorf("ToBF16(%#08x) = %#04x, want %#04x", c.in, got[0], c.want)
		}
	}
	var nan [1]uint16
	ToBF16(nan[:], []float32{float32(math.NaN())})
	if v := math.Float32frombits(uint32(nan[0]) << 16); v == v {
		t.Errorf("NaN became %g", v)
	}
}

// BenchmarkAttendKV times one KV head's attention (8 query heads of 256)
// over n cached positions at every cache width, in positions per second;
// n = 32768 leaves the cache in memory rather than in L2.
func BenchmarkAttendKV(b *testing.B) {
	for _, n := range []int{4096, 32768} {
		for _, w := range kvWidthRuns(n) {
			b.Run(fmt.Sprintf("n=%d/%s", n, w.name), func(b *testing.B) {
				for b.Loop() {
					w.run()
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "pos/s")
			})
		}
	}
}

// kvWidthRun is one cache width's scores and values kernels over fixed
// inputs.
type kvWidthRun struct {
	name string
	run  func()
}

// kvWidthRuns builds one KV head's attention inputs (8 query heads of 256
// in a 512-wide KV row, the 35B-A3B group) over n cached positions and
// returns a run of the kernels at each cache width: f32, bf16 and q8.
func kvWidthRuns(n int) []kvWidthRun {
	const heads, d, kvd = 8, 256, 512
	rng := rand.New(rand.NewPCG(1, 2))
	q, kf, vf := randomVector(rng, heads*d), randomVector(rng, n*kvd), randomVector(rng, n*kvd)
	scores, qi, o := make([]float32, heads*n), make([]float32, heads*d), make([]float32, heads*d)
	scratch := make([]float32, AttendScratch(heads, d))
	kq, vq := q8Cache(kf, kvd, 64), q8Cache(vf, kvd, 64)
	kb, vb := make([]uint16, len(kf)), make([]uint16, len(vf))
	ToBF16(kb, kf)
	ToBF16(vb, vf)
	return []kvWidthRun{
		{"f32", func() {
			AttendScores(scores, q, d, kf, kvd, n, 0.0625, qi)
			AttendValues(o, scores, d, vf, kvd, n)
		}},
		{"bf16", func() {
			AttendScoresBF16(scores, q, d, BF16Rows{kb, kvd}, n, 0.0625, qi, scratch)
			AttendValuesBF16(o, scores, d, BF16Rows{vb, kvd}, n, scratch)
		}},
		{"q8", func() {
			AttendScoresQ8(scores, q, d, kq, n, 0.0625, qi, scratch)
			AttendValuesQ8(o, scores, d, vq, n, scratch)
		}},
	}
}
