package kernels

import (
	"runtime"
	"sync"
)

// Pool runs MatVec and MatMul on persistent worker goroutines, splitting the
// rows of the matrix into one contiguous span per thread. Each output element
// is still produced by the single-threaded code, so results are bitwise
// identical for any thread count. A nil *Pool computes on the caller's
// goroutine. Calls on one Pool are serialised; use one Pool per decoding
// goroutine.
type Pool struct {
	mu      sync.Mutex
	work    []chan span // one per helper; the caller computes span 0 itself
	done    chan struct{}
	minWork int // below this many weight·row products, stay single-threaded

	// The current job, written under mu before the spans are sent (the
	// channel send orders these writes before the helpers read them).
	dst, x []float32
	m      *Matrix
	n      int
	sumX   []float32
	sumBuf []float32
}

type span struct{ lo, hi int }

// minParallelWork is the number of weight×input products below which a Pool
// does not wake its helpers: one hand-off costs about a microsecond, which
// the pure-Go kernel spends on roughly this much work.
const minParallelWork = 1 << 14

// NewPool starts threads−1 helper goroutines (the caller is the remaining
// thread). threads < 1 means runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool {
	if threads < 1 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{done: make(chan struct{}, threads), minWork: minParallelWork}
	for range threads - 1 {
		ch := make(chan span, 1)
		p.work = append(p.work, ch)
		go p.serve(ch)
	}
	return p
}

// Threads is the number of threads products are split across.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return len(p.work) + 1
}

// Close stops the helpers. The Pool stays usable, single-threaded.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.work {
		close(ch)
	}
	p.work = nil
}

func (p *Pool) serve(ch chan span) {
	for s := range ch {
		matMulRows(p.dst, p.m, p.x, p.n, p.sumX, s.lo, s.hi)
		p.done <- struct{}{}
	}
}

// MatVec is MatVec split across the pool's threads.
func (p *Pool) MatVec(dst []float32, m *Matrix, x []float32) {
	if p == nil {
		MatVec(dst, m, x)
		return
	}
	checkShapes("Pool.MatVec", dst, m, x, 1)
	p.run(dst, m, x, 1)
}

// MatMul is MatMul split across the pool's threads.
func (p *Pool) MatMul(dst []float32, m *Matrix, x []float32, n int) {
	if p == nil {
		MatMul(dst, m, x, n)
		return
	}
	checkShapes("Pool.MatMul", dst, m, x, n)
	p.run(dst, m, x, n)
}

func (p *Pool) run(dst []float32, m *Matrix, x []float32, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sumX []float32
	if m.Enc.quantized() {
		p.sumBuf = groupSums(p.sumBuf[:0], m, x, n)
		sumX = p.sumBuf
	}
	threads := min(len(p.work)+1, m.Rows)
	if threads <= 1 || m.Rows*m.Cols*n < p.minWork {
		matMulRows(dst, m, x, n, sumX, 0, m.Rows)
		return
	}
	p.dst, p.m, p.x, p.n, p.sumX = dst, m, x, n, sumX
	for t := 1; t < threads; t++ {
		p.work[t-1] <- span{m.Rows * t / threads, m.Rows * (t + 1) / threads}
	}
	matMulRows(dst, m, x, n, sumX, 0, m.Rows/threads)
	for t := 1; t < threads; t++ {
		<-p.done
	}
	// Drop the references so a finished job does not pin caller memory.
	p.dst, p.m, p.x, p.sumX = nil, nil, nil, nil
}
