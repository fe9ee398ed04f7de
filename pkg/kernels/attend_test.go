package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// attendOracle is the attention of one KV head written the way the model
// first wrote it: a DotRows of every query row per position, then AxpyRows
// of every value row in ascending position order onto a cleared output.
func attendOracle(q []float32, d int, keys, values []float32, stride, n int, scale float32) (scores, o []float32) {
	heads := len(q) / d
	scores = make([]float32, heads*n)
	o = make([]float32, heads*d)
	tmp := make([]float32, heads)
	for t := range n {
		for j := range heads {
			tmp[j] = dot4Generic(q[j*d:(j+1)*d], keys[t*stride:t*stride+d])
		}
		for j, v := range tmp {
			scores[j*n+t] = v * scale
		}
	}
	for t := range n {
		for j := range heads {
			row, al := o[j*d:(j+1)*d], scores[j*n+t]
			for i, x := range values[t*stride : t*stride+d] {
				row[i] += float32(al * x)
			}
		}
	}
	return scores, o
}

// TestAttendBitwise: AttendScores and AttendValues give the oracle's bits
// for head counts in and out of fours, widths in and out of the assembly's
// 4- and 64-column steps, position counts around its four-position step and
// tile of 64, and key rows wider than the head (a KV head inside a row of
// several). Under the race detector (or -short), which slows this
// single-goroutine matrix an order of magnitude and has nothing to race in
// it, the head counts are 1, 3 and 4 and the position counts 3, 5 and 65
// (all widths and rows); scripts/test.sh runs it whole without -race.
func TestAttendBitwise(t *testing.T) {
	headCounts, positions := []int{1, 2, 3, 4, 6, 8, 12}, []int{1, 3, 4, 5, 8, 63, 64, 65, 130}
	if testfix.Quick(raceEnabled) {
		headCounts, positions = []int{1, 3, 4}, []int{3, 5, 65}
	}
	for _, level := range floatAsmLevels() {
		restore := level.set()
		checkAttendLevel(t, level.name, headCounts, positions)
		restore()
	}
}

func checkAttendLevel(t *testing.T, level string, headCounts, positions []int) {
	rng := rand.New(rand.NewPCG(71, 72))
	for _, heads := range headCounts {
		for _, d := range []int{4, 6, 32, 64, 96, 128, 256} {
			for _, n := range positions {
				for _, extra := range []int{0, 2 * d} {
					name := fmt.Sprintf("%s/heads=%d/d=%d/n=%d/stride=%d", level, heads, d, n, d+extra)
					stride := d + extra
					q := floatEdgeVector(rng, heads*d)
					keys, values := floatEdgeVector(rng, n*stride), floatEdgeVector(rng, n*stride)
					scale := float32(0.0625)
					wantScores, wantO := attendOracle(q, d, keys, values, stride, n, scale)
					scores, qi := make([]float32, heads*n), make([]float32, heads*d)
					AttendScores(scores, q, d, keys, stride, n, scale, qi)
					assertSameFloats(t, name+" scores", scores, wantScores)
					o := floatEdgeVector(rng, heads*d) // stale output: AttendValues must clear it
					AttendValues(o, wantScores, d, values, stride, n)
					assertSameFloats(t, name+" values", o, wantO)
				}
			}
		}
	}
}

func TestAttendRejectsBadShapes(t *testing.T) {
	for name, f := range map[string]func(){
		"short keys": func() {
			AttendScores(make([]float32, 2), make([]float32, 8), 4, make([]float32, 7), 4, 2, 1, make([]float32, 8))
		},
		"short scores": func() {
			AttendScores(make([]float32, 3), make([]float32, 8), 4, make([]float32, 8), 4, 2, 1, make([]float32, 8))
		},
		"stride < d": func() { AttendValues(make([]float32, 8), make([]float32, 4), 4, make([]float32, 8), 3, 2) },
		"short w":    func() { AttendValues(make([]float32, 8), make([]float32, 3), 4, make([]float32, 8), 4, 2) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

// BenchmarkAttend times one KV head's attention (8 query heads of 256, the
// Qwen3.5-35B-A3B group) over n cached positions, the kernels against the
// DotRows/AxpyRows formulation they replaced, in K/V bytes per second (K/V
// stay in cache between iterations: this is compute, not memory).
func BenchmarkAttend(b *testing.B) {
	const heads, d, kvd = 8, 256, 512
	for _, n := range []int{128, 4096} {
		rng := rand.New(rand.NewPCG(1, 2))
		q, keys, values := randomVector(rng, heads*d), randomVector(rng, n*kvd), randomVector(rng, n*kvd)
		scores, qi, o := make([]float32, heads*n), make([]float32, heads*d), make([]float32, heads*d)
		b.Run(fmt.Sprintf("n=%d/kernels", n), func(b *testing.B) {
			b.SetBytes(int64(2 * n * d * 4))
			for b.Loop() {
				AttendScores(scores, q, d, keys, kvd, n, 0.0625, qi)
				AttendValues(o, scores, d, values, kvd, n)
			}
		})
		b.Run(fmt.Sprintf("n=%d/rows", n), func(b *testing.B) {
			tmp := make([]float32, heads)
			b.SetBytes(int64(2 * n * d * 4))
			for b.Loop() {
				for t := range n {
					DotRows(tmp, q, keys[t*kvd:t*kvd+d])
					for j, v := range tmp {
						scores[j*n+t] = v * 0.0625
					}
				}
				clear(o)
				for t := range n {
					for j := range heads {
						tmp[j] = scores[j*n+t]
					}
					AxpyRows(o, tmp, values[t*kvd:t*kvd+d])
				}
			}
		})
	}
}

// floatAsmLevel is one implementation of the float kernels (the flags it
// sets); floatAsmLevels lists those this CPU runs, so bitwise tests cover
// the AVX2 kernels on AVX-512 machines too.
type floatAsmLevel struct {
	name         string
	avx512, avx2 bool
}
