package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
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
