package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// TestMatMulFastMultiIsBitwise: one job over several matrices (mixed
// encodings, any thread count, tiny and chunked sizes) gives each matrix
// MatMulFast's bits.
func TestMatMulFastMultiIsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	encs := [][]Encoding{{Q4, Q4}, {Q4, Q8, BF16, Q4}, {BF16}, {Q8, F32}}
	for _, threads := range []int{0, 1, 2, 3, 7} {
		p := splittingPool(threads)
		for _, set := range encs {
			for _, rows := range []int{1, 9, 64, 301} {
				for _, n := range []int{1, 3} {
					var ms []*Matrix
					var dsts, wants [][]float32
					x := randomVector(rng, n*192)
					for i, enc := range set {
						m := randomMatrix(t, rng, enc, rows+5*i, 192)
						want := make([]float32, n*m.Rows)
						MatMulFast(want, m, x, n)
						ms, wants = append(ms, m), append(wants, want)
						dsts = append(dsts, make([]float32, n*m.Rows))
					}
					p.MatMulFastMulti(dsts, ms, x, n)
					for i := range ms {
						assertSameFloats(t, fmt.Sprintf("%d threads, %v, rows %d, n %d, matrix %d", threads, set, rows, n, i), dsts[i], wants[i])
					}
				}
			}
		}
		p.Close()
	}
}

// TestMatVecFastEachIsBitwise: every matrix against its own input, in one
// job, gives bitwise MatVecFast's output, for any thread count and mix of
// widths and shapes (the expert down projections have 8 groups per row).
func TestMatVecFastEachIsBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(53, 54))
	encs := [][]Encoding{{Q4, Q4, Q4}, {Q4, Q8}, {Q4, BF16}, {Q8}}
	for _, threads := range []int{0, 1, 2, 3, 7} {
		p := splittingPool(threads)
		for _, set := range encs {
			for _, shape := range [][2]int{{1, 64}, {9, 512}, {301, 192}, {64, 2048}} {
				var ms []*Matrix
				var dsts, wants, xs [][]float32
				for i, enc := range set {
					m := randomMatrix(t, rng, enc, shape[0]+3*i, shape[1])
					x := randomVector(rng, shape[1])
					want := make([]float32, m.Rows)
					MatVecFast(want, m, x)
					ms, xs, wants = append(ms, m), append(xs, x), append(wants, want)
					dsts = append(dsts, make([]float32, m.Rows))
				}
				p.MatVecFastEach(dsts, ms, xs)
				for i := range ms {
					assertSameFloats(t, fmt.Sprintf("%d threads, %v, shape %v, matrix %d", threads, set, shape, i), dsts[i], wants[i])
				}
			}
		}
		p.Close()
	}
}

// TestParallelCoversEveryIndexOnce: every index is passed exactly once,
// worker ids stay below Threads(), and one worker's calls never overlap.
func TestParallelCoversEveryIndexOnce(t *testing.T) {
	for _, threads := range []int{0, 1, 2, 3, 7} {
		var p *Pool
		if threads > 0 {
			p = NewPool(threads)
		}
		for n := 0; n <= 40; n++ {
			hits := make([]atomic.Int32, n)
			busy := make([]atomic.Bool, p.Threads())
			p.Parallel(n, func(worker, lo, hi int) {
				if worker < 0 || worker >= p.Threads() {
					t.Errorf("worker %d of %d threads", worker, p.Threads())
					return
				}
				if busy[worker].Swap(true) {
					t.Errorf("worker %d called twice at once", worker)
				}
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
				busy[worker].Store(false)
			})
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("%d threads, n %d: index %d passed %d times", threads, n, i, h)
				}
			}
		}
		p.Close()
	}
}

// TestStealingCoversRanges: with every range claimed from both ends at
// once, each row is handed out exactly once.
func TestStealingCoversRanges(t *testing.T) {
	var r rowRange
	for _, chunk := range []int{1, 3, 8} {
		r.set(5, 103)
		seen := make([]int, 103)
		for turn := 0; ; turn++ {
			take := r.takeFront
			if turn%2 == 1 {
				take = r.takeBack
			}
			lo, hi, ok := take(chunk)
			if !ok {
				break
			}
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		}
		for i, c := range seen {
			if want := map[bool]int{true: 1, false: 0}[i >= 5]; c != want {
				t.Fatalf("chunk %d: row %d handed out %d times, want %d", chunk, i, c, want)
			}
		}
	}
}
