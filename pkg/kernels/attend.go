package kernels

import "fmt"

// Attention over a cache of key and value rows, for a group of query heads
// that share one KV head. Each score is DotRows' dot (four lanes, (l0+l1)+
// (l2+l3)) times the scale; each output column is AxpyRows' chain over the
// positions in ascending order from zero. The SIMD versions take four heads
// per register and loop over the positions themselves, so they are bitwise
// these references on every CPU.

// attendTile is how many positions of values AttendValues runs over each
// block of output columns at a time: 64 rows of a 256-wide head are 64 KiB,
// which stays in L2 while every head and column block reads it.
const attendTile = 64

// AttendScores sets scores[j·n+t] = (q_j·k_t)·scale for the heads query rows
// q_j = q[j·d:(j+1)·d] and the n key rows k_t = keys[t·stride:][:d]. qi is
// scratch of len(q) (the queries interleaved four heads at a time).
func AttendScores(scores, q []float32, d int, keys []float32, stride, n int, scale float32, qi []float32) {
	heads := checkAttend("AttendScores", q, d, keys, stride, n)
	if len(scores) != heads*n || len(qi) != len(q) {
		panic(fmt.Sprintf("kernels.AttendScores: %d scores and %d of scratch for %d heads × %d positions (%d query values)", len(scores), len(qi), heads, n, len(q)))
	}
	if attendScoresAsm(scores, q, d, keys, stride, n, scale, qi) {
		return
	}
	for t := range n {
		k := keys[t*stride : t*stride+d]
		for j := range heads {
			scores[j*n+t] = dot4Generic(q[j*d:(j+1)*d], k) * scale
		}
	}
}

// AttendValues sets o[j·d:(j+1)·d] = Σ_t w[j·n+t]·v_t over the n value rows
// v_t = values[t·stride:][:d], every product rounded to float32 and added
// in ascending t from zero, as AxpyRows would add them row by row.
func AttendValues(o, w []float32, d int, values []float32, stride, n int) {
	heads := checkAttend("AttendValues", o, d, values, stride, n)
	if len(w) != heads*n {
		panic(fmt.Sprintf("kernels.AttendValues: %d weights for %d heads × %d positions", len(w), heads, n))
	}
	clear(o)
	for t0 := 0; t0 < n; t0 += attendTile {
		tile := min(attendTile, n-t0)
		if attendValuesAsm(o, w[t0:], n, d, values[t0*stride:], stride, tile) {
			continue
		}
		for t := t0; t < t0+tile; t++ {
			v := values[t*stride : t*stride+d]
			for j := range heads {
				al := w[j*n+t]
				row := o[j*d : (j+1)*d]
				for i, x := range v {
					row[i] += float32(al * x)
				}
			}
		}
	}
}

// checkAttend checks the shapes both kernels share and returns the heads.
func checkAttend(fn string, rows []float32, d int, cache []float32, stride, n int) int {
	if d <= 0 || len(rows)%d != 0 || n < 0 || stride < d || (n > 0 && len(cache) < (n-1)*stride+d) {
		panic(fmt.Sprintf("kernels.%s: %d row values of width %d over %d positions of stride %d in %d cached values", fn, len(rows), d, n, stride, len(cache)))
	}
	return len(rows) / d
}
