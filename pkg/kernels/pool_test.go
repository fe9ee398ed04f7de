package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPoolIsBitwiseSingleThreaded(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, threads := range []int{1, 2, 3, 7} {
		p := NewPool(threads)
		p.minWork = 0 // split even the smallest products
		for _, enc := range allEncodings {
			for _, rows := range []int{1, 2, 3, 7, 17} {
				m := randomMatrix(t, rng, enc, rows, 192)
				x := randomVector(rng, 3*m.Cols)
				want := make([]float32, 3*rows)
				MatMul(want, m, x, 3)
				got := make([]float32, 3*rows)
				p.MatMul(got, m, x, 3)
				assertBitwise(t, fmt.Sprintf("%d threads, %v, %d rows, MatMul", threads, enc, rows), got, want)
				got = got[:rows]
				p.MatVec(got, m, x[:m.Cols])
				assertBitwise(t, fmt.Sprintf("%d threads, %v, %d rows, MatVec", threads, enc, rows), got, want[:rows])
			}
		}
		p.Close()
	}
}

func TestNilAndClosedPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	m := randomMatrix(t, rng, Q8, 5, 128)
	x := randomVector(rng, m.Cols)
	want := make([]float32, m.Rows)
	MatVec(want, m, x)

	var nilPool *Pool
	got := make([]float32, m.Rows)
	nilPool.MatVec(got, m, x)
	assertBitwise(t, "nil Pool", got, want)
	if nilPool.Threads() != 1 {
		t.Errorf("nil Pool has %d threads, want 1", nilPool.Threads())
	}
	nilPool.Close()

	p := NewPool(3)
	p.Close()
	clear(got)
	p.MatVec(got, m, x)
	assertBitwise(t, "closed Pool", got, want)
	p.Close() // twice is harmless
}

func TestPoolConcurrentCallers(t *testing.T) {
	// Calls are serialised: concurrent callers each get their own result.
	rng := rand.New(rand.NewPCG(15, 16))
	p := NewPool(3)
	defer p.Close()
	p.minWork = 0
	m := randomMatrix(t, rng, Q4, 9, 256)
	var wg sync.WaitGroup
	for range 4 {
		x := randomVector(rng, m.Cols)
		want := make([]float32, m.Rows)
		MatVec(want, m, x)
		wg.Go(func() {
			got := make([]float32, m.Rows)
			for range 50 {
				p.MatVec(got, m, x)
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("concurrent caller got %g at %d, want %g", got[i], i, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// splittingPool is a pool of threads that splits even the tiniest product
// (nil for 0 threads: the package functions on the caller).
func splittingPool(threads int) *Pool {
	if threads == 0 {
		return nil
	}
	p := NewPool(threads)
	p.minWork, p.minWorkQ = 0, 0
	return p
}

// TestPoolFastIsBitwiseSingleThreaded: the Fast and Q entry points give the
// single-threaded bits for any thread count, encoding and row split.
func TestPoolFastIsBitwiseSingleThreaded(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, threads := range []int{1, 2, 3, 7} {
		p := splittingPool(threads)
		for _, enc := range allEncodings {
			for _, rows := range []int{1, 2, 3, 7, 17, 64} {
				m := randomMatrix(t, rng, enc, rows, 192)
				x := randomVector(rng, 3*m.Cols)
				want := make([]float32, 3*rows)
				MatMulFast(want, m, x, 3)
				got := make([]float32, 3*rows)
				p.MatMulFast(got, m, x, 3)
				what := fmt.Sprintf("%d threads, %v, %d rows", threads, enc, rows)
				assertSameFloats(t, what+", MatMulFast", got, want)
				got = got[:rows]
				p.MatVecFast(got, m, x[:m.Cols])
				assertSameFloats(t, what+", MatVecFast", got, want[:rows])
				if enc.quantized() {
					qa := new(QActivation)
					qa.Quantize(x, m.Cols)
					all := make([]float32, 3*rows)
					p.MatMulQ(all, m, qa)
					assertSameFloats(t, what+", MatMulQ", all, want)
					qa.Quantize(x[:m.Cols], m.Cols)
					p.MatVecQ(got, m, qa)
					assertSameFloats(t, what+", MatVecQ", got, want[:rows])
				}
			}
		}
		p.Close()
	}
}

func TestPoolFastConcurrentCallers(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	p := NewPool(3)
	defer p.Close()
	p.minWorkQ = 0
	m := randomMatrix(t, rng, Q8, 9, 256)
	var wg sync.WaitGroup
	for range 4 {
		x := randomVector(rng, m.Cols)
		want := make([]float32, m.Rows)
		MatVecFast(want, m, x)
		wg.Go(func() {
			got := make([]float32, m.Rows)
			for range 50 {
				p.MatVecFast(got, m, x)
				for i := range want {
					if got[i] != want[i] {
						t.Errorf("concurrent caller got %g at %d, want %g", got[i], i, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestPoolParksAndWakes: a job after the helpers have parked (long idle)
// still completes, and so does a pool whose helpers never spin.
func TestPoolParksAndWakes(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	m := randomMatrix(t, rng, Q4, 40, 256)
	x := randomVector(rng, m.Cols)
	want := make([]float32, m.Rows)
	MatVecFast(want, m, x)
	for _, spin := range []time.Duration{0, spinTime} {
		p := newPool(2, spin)
		p.minWorkQ = 0
		got := make([]float32, m.Rows)
		for i := range 5 {
			time.Sleep(time.Duration(i) * time.Millisecond) // let the helper park
			clear(got)
			p.MatVecFast(got, m, x)
			assertSameFloats(t, fmt.Sprintf("spin %d, call %d", spin, i), got, want)
		}
		p.Close()
	}
}

// BenchmarkPoolHandoff is the cost of splitting a tiny product across the
// pool (the work itself is a few nanoseconds): wake, run, wait.
func BenchmarkPoolHandoff(b *testing.B) {
	m := randomMatrix(b, rand.New(rand.NewPCG(1, 1)), F32, 2, 8)
	x, dst := make([]float32, 8), make([]float32, 2)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			p.minWork = 0
			for b.Loop() {
				p.MatVec(dst, m, x)
			}
		})
	}
}

// BenchmarkPoolWake measures how late a parked helper starts its share of
// a job (µs from the publish to its first index): the cost the spin before
// parking avoids. spin=0 parks at once; spin=default finds it spinning
// when the gap between jobs (gap) is shorter than the spin.
func BenchmarkPoolWake(b *testing.B) {
	for _, spin := range []time.Duration{0, spinTime} {
		for _, gap := range []time.Duration{20 * time.Microsecond, time.Millisecond} {
			b.Run(fmt.Sprintf("spin=%v/gap=%v", spin, gap), func(b *testing.B) {
				p := newPool(2, spin)
				defer p.Close()
				var delays []float64
				var start time.Time
				var late atomic.Int64
				for b.Loop() {
					for t0 := time.Now(); time.Since(t0) < gap; {
					}
					start = time.Now()
					late.Store(-1)
					p.Parallel(2, func(worker, lo, hi int) {
						if worker == 1 {
							late.Store(int64(time.Since(start)))
							return
						}
						// Hold the caller here so it cannot steal the helper's index.
						for late.Load() < 0 && time.Since(start) < 10*time.Millisecond {
						}
					})
					delays = append(delays, float64(late.Load())/1e3)
				}
				slices.Sort(delays)
				b.ReportMetric(delays[len(delays)/2], "median-µs")
				b.ReportMetric(delays[len(delays)*9/10], "p90-µs")
			})
		}
	}
}
