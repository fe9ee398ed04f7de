package kernels

import "fmt"

// Several query sets over one KV head's cache at once (a prefill's tokens,
// which attend to nearly the same positions): every tile of cached rows is
// widened once for all the sets that reach it, instead of once per set. Set
// i is a [heads, d] block of queries attending to the first ns[i] positions;
// its scores and outputs are bitwise what the one-set kernels give it (the
// same tile kernels over the same widened rows, tile by tile in ascending
// order), whatever the other sets.

// AttendScoresQ8Multi is AttendScoresQ8 for each set i: scores[i]
// ([heads, ns[i]]) from queries qs[i] with its own qis[i]. scratch is as for
// AttendScoresQ8.
func AttendScoresQ8Multi(scores, qs [][]float32, ns []int, d int, keys Q8Rows, scale float32, qis [][]float32, scratch []float32) {
	checkQ8("AttendScoresQ8Multi", d, keys, maxOf(ns))
	attendScoresTiledMulti(scores, qs, ns, d, scale, qis, scratch, func(dst []float32, t0, rows int) {
		widenQ8(dst, keys, d, t0, rows)
	})
}

// AttendValuesQ8Multi is AttendValuesQ8 for each set i: os[i] ([heads, d])
// from weights ws[i] ([heads, ns[i]]).
func AttendValuesQ8Multi(os, ws [][]float32, ns []int, d int, values Q8Rows, scratch []float32) {
	checkQ8("AttendValuesQ8Multi", d, values, maxOf(ns))
	attendValuesTiledMulti(os, ws, ns, d, scratch, func(dst []float32, t0, rows int) {
		widenQ8(dst, values, d, t0, rows)
	})
}

// AttendScoresBF16Multi is AttendScoresBF16 for each set, as AttendScoresQ8Multi.
func AttendScoresBF16Multi(scores, qs [][]float32, ns []int, d int, keys BF16Rows, scale float32, qis [][]float32, scratch []float32) {
	checkBF16("AttendScoresBF16Multi", d, keys, maxOf(ns))
	attendScoresTiledMulti(scores, qs, ns, d, scale, qis, scratch, func(dst []float32, t0, rows int) {
		widenBF16(dst, keys, d, t0, rows)
	})
}

// AttendValuesBF16Multi is AttendValuesBF16 for each set, as AttendValuesQ8Multi.
func AttendValuesBF16Multi(os, ws [][]float32, ns []int, d int, values BF16Rows, scratch []float32) {
	checkBF16("AttendValuesBF16Multi", d, values, maxOf(ns))
	attendValuesTiledMulti(os, ws, ns, d, scratch, func(dst []float32, t0, rows int) {
		widenBF16(dst, values, d, t0, rows)
	})
}

func maxOf(ns []int) int {
	m := 0
	for _, n := range ns {
		m = max(m, n)
	}
	return m
}

// maxMultiSets bounds the sets of one call (their per-set flags live on the
// stack).
const maxMultiSets = 64

// attendScoresTiledMulti is attendScoresTiled for each set: a tile is
// widened to the longest set's rows once; each set's tile kernel reads its
// own first rows of it, which are the rows attendScoresTiled would widen.
func attendScoresTiledMulti(scores, qs [][]float32, ns []int, d int, scale float32, qis [][]float32, scratch []float32, widen func(dst []float32, t0, rows int)) {
	sets := len(qs)
	if sets == 0 {
		return
	}
	heads := len(qs[0]) / d
	if sets > maxMultiSets || len(scores) != sets || len(ns) != sets || len(qis) != sets || d <= 0 || len(scratch) < AttendScratch(heads, d) {
		panic(fmt.Sprintf("kernels.AttendScoresMulti: %d query sets, %d scores, %d lengths, %d qi, width %d, %d of scratch", sets, len(scores), len(ns), len(qis), d, len(scratch)))
	}
	var asm [maxMultiSets]bool
	for i := range sets {
		if len(qs[i]) != heads*d || len(scores[i]) != heads*ns[i] || len(qis[i]) != len(qs[i]) || ns[i] < 0 {
			panic(fmt.Sprintf("kernels.AttendScoresMulti: set %d: %d scores, %d query values of width %d (%d heads) and %d of qi for %d positions", i, len(scores[i]), len(qs[i]), d, heads, len(qis[i]), ns[i]))
		}
		asm[i] = ns[i] > 0 && interleaveQueriesAsm(qs[i], d, qis[i])
	}
	n := maxOf(ns)
	tileRows, tileScores := scratch[:attendTile*d], scratch[attendTile*d:]
	for t0 := 0; t0 < n; t0 += attendTile {
		widen(tileRows[:min(attendTile, n-t0)*d], t0, min(attendTile, n-t0))
		for i := range sets {
			if ns[i] <= t0 {
				continue
			}
			rows := min(attendTile, ns[i]-t0)
			ts := tileScores[:heads*rows]
			if asm[i] {
				attendScoresTileAsm(ts, qis[i], d, tileRows, rows, scale)
			} else {
				AttendScores(ts, qs[i], d, tileRows, d, rows, scale, qis[i])
			}
			for j := range heads {
				copy(scores[i][j*ns[i]+t0:j*ns[i]+t0+rows], ts[j*rows:(j+1)*rows])
			}
		}
	}
}

// attendValuesTiledMulti is attendValuesTiled for each set, as above.
func attendValuesTiledMulti(os, ws [][]float32, ns []int, d int, scratch []float32, widen func(dst []float32, t0, rows int)) {
	sets := len(os)
	if sets == 0 {
		return
	}
	heads := len(os[0]) / d
	if len(ws) != sets || len(ns) != sets || d <= 0 || len(scratch) < attendTile*d {
		panic(fmt.Sprintf("kernels.AttendValuesMulti: %d output sets, %d weight sets, %d lengths, width %d, %d of scratch", sets, len(ws), len(ns), d, len(scratch)))
	}
	for i := range sets {
		if len(os[i]) != heads*d || len(ws[i]) != heads*ns[i] || ns[i] < 0 {
			panic(fmt.Sprintf("kernels.AttendValuesMulti: set %d: %d outputs of width %d (%d heads), %d weights for %d positions", i, len(os[i]), d, heads, len(ws[i]), ns[i]))
		}
		clear(os[i])
	}
	n := maxOf(ns)
	tileRows := scratch[:attendTile*d]
	for t0 := 0; t0 < n; t0 += attendTile {
		widen(tileRows[:min(attendTile, n-t0)*d], t0, min(attendTile, n-t0))
		for i := range sets {
			if ns[i] <= t0 {
				continue
			}
			rows := min(attendTile, ns[i]-t0)
			o, w := os[i], ws[i]
			if attendValuesAsm(o, w[t0:], ns[i], d, tileRows, d, rows) {
				continue
			}
			for t := range rows {
				v := tileRows[t*d : (t+1)*d]
				for j := range heads {
					al := w[j*ns[i]+t0+t]
					row := o[j*d : (j+1)*d]
					for k, x := range v {
						row[k] += float32(al * x)
					}
				}
			}
		}
	}
}
