package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool runs MatVec and MatMul on persistent worker goroutines, splitting the
// rows of the matrix into one contiguous span per thread. Each output element
// is still produced by the single-threaded code, so results are bitwise
// identical for any thread count. A nil *Pool computes on the caller's
// goroutine. Calls on one Pool are serialised; use one Pool per decoding
// goroutine.
//
// Hand-off: the caller publishes a job by bumping an atomic sequence number;
// helpers spin on it for a bounded time after each job (decode issues
// hundreds of products per token, microseconds apart) and then park on a
// channel, so an idle Pool burns no CPU. Completion works the same way in
// the other direction. Spinners yield the P every few polls: a goroutine
// woken from a channel waits in the waker's P, and without the yield it
// would wait until the spin ends or the runtime steals it (microseconds).
type Pool struct {
	mu       sync.Mutex
	helpers  []*helper // the caller computes span 0 itself
	minWork  int       // below this many weight·row products, stay single-threaded
	minWorkQ int       // the same for the integer path, which is several times faster
	spin     int       // polls before parking; 0 when helpers cannot all run at once

	seq     atomic.Uint32 // job number: helpers run a job when it changes
	pending atomic.Int32  // helpers still on the current job
	waiting atomic.Bool   // the caller is parked on done
	done    chan struct{} // wakes a parked caller (capacity 1)
	stop    bool          // set with the last seq bump by Close

	// The current job, written under mu before seq is bumped (the atomic
	// orders these writes before the helpers read them).
	dst, x []float32
	m      *Matrix
	n      int
	sumX   []float32
	qa     *QActivation // non-nil: the integer path (Q4/Q8 Fast and Q entry points)

	sumBuf []float32
	qaBuf  QActivation // MatVecFast/MatMulFast quantize x here, once per call
}

type helper struct {
	span     span          // rows of the current job, written before seq
	sleeping atomic.Bool   // parked on wake
	wake     chan struct{} // capacity 1; a stale token only causes a re-check
}

type span struct{ lo, hi int }

// minParallelWork is the number of weight×input products below which a Pool
// does not wake its helpers: waking a parked helper costs microseconds,
// which the pure-Go kernel spends on roughly this much work.
const minParallelWork = 1 << 14

// minParallelWorkQ is minParallelWork for the integer path, which streams
// weights at memory speed.
const minParallelWorkQ = 1 << 16

// spinPolls bounds the busy wait before parking: some 10–20 µs of atomic
// loads and yields, longer than the gap between a token's products, short
// enough that an idle decoder gives its cores back at once. Every
// pollsPerYield polls the spinner calls runtime.Gosched.
const (
	spinPolls     = 1 << 12
	pollsPerYield = 32
)

// NewPool starts threads−1 helper goroutines (the caller is the remaining
// thread). threads < 1 means runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool {
	if threads < 1 {
		threads = runtime.GOMAXPROCS(0)
	}
	spin := spinPolls
	if runtime.GOMAXPROCS(0) < threads {
		spin = 0 // a spinner could hold the P its peer needs
	}
	return newPool(threads, spin)
}

func newPool(threads, spin int) *Pool {
	p := &Pool{done: make(chan struct{}, 1), minWork: minParallelWork, minWorkQ: minParallelWorkQ, spin: spin}
	for range threads - 1 {
		h := &helper{wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		go p.serve(h)
	}
	return p
}

// Threads is the number of threads products are split across.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return len(p.helpers) + 1
}

// Close stops the helpers. The Pool stays usable, single-threaded.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.helpers) == 0 {
		return
	}
	p.stop = true
	p.publish()
	p.helpers = nil
}

func (p *Pool) serve(h *helper) {
	var last uint32
	for {
		last = p.awaitJob(h, last)
		if p.stop {
			return
		}
		p.compute(h.span.lo, h.span.hi)
		if p.pending.Add(-1) == 0 && p.waiting.Load() {
			notify(p.done)
			runtime.Gosched() // let the caller, queued on this P, run now
		}
	}
}

// awaitJob returns the next job number after last, spinning then parking.
func (p *Pool) awaitJob(h *helper, last uint32) uint32 {
	for i := range p.spin {
		if s := p.seq.Load(); s != last {
			return s
		}
		if i%pollsPerYield == pollsPerYield-1 {
			runtime.Gosched()
		}
	}
	for {
		h.sleeping.Store(true)
		if s := p.seq.Load(); s != last {
			h.sleeping.Store(false)
			return s
		}
		<-h.wake
		h.sleeping.Store(false)
	}
}

// publish starts the job whose fields and spans are set: every helper runs
// its span (possibly empty).
func (p *Pool) publish() {
	p.pending.Store(int32(len(p.helpers)))
	p.seq.Add(1)
	for _, h := range p.helpers {
		if h.sleeping.Load() {
			notify(h.wake)
		}
	}
}

// awaitHelpers returns once every helper has finished the current job.
func (p *Pool) awaitHelpers() {
	for i := range p.spin {
		if p.pending.Load() == 0 {
			return
		}
		if i%pollsPerYield == pollsPerYield-1 {
			runtime.Gosched()
		}
	}
	for {
		p.waiting.Store(true)
		if p.pending.Load() == 0 {
			p.waiting.Store(false)
			return
		}
		<-p.done
		p.waiting.Store(false)
	}
}

// notify leaves a token in a capacity-1 channel unless one is already there.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// compute runs rows [lo, hi) of the current job.
func (p *Pool) compute(lo, hi int) {
	if lo >= hi {
		return
	}
	if p.qa != nil {
		qMatMulRows(p.dst, p.m, p.qa, lo, hi)
		return
	}
	matMulRows(p.dst, p.m, p.x, p.n, p.sumX, lo, hi)
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
	p.dst, p.m, p.x, p.n, p.sumX = dst, m, x, n, sumX
	p.split(m.Rows*m.Cols*n < p.minWork)
}

// MatVecFast is MatVecFast split across the pool's threads: x is quantized
// once, on the calling goroutine, and shared by all of them.
func (p *Pool) MatVecFast(dst []float32, m *Matrix, x []float32) {
	switch {
	case p == nil:
		MatVecFast(dst, m, x)
		return
	case !m.Enc.quantized():
		p.MatVec(dst, m, x)
		return
	}
	checkShapes("Pool.MatVecFast", dst, m, x, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.qaBuf.Quantize(x, m.Cols)
	p.runQ(dst, m, &p.qaBuf)
}

// MatMulFast is MatMulFast split across the pool's threads.
func (p *Pool) MatMulFast(dst []float32, m *Matrix, x []float32, n int) {
	switch {
	case p == nil:
		MatMulFast(dst, m, x, n)
		return
	case !m.Enc.quantized():
		p.MatMul(dst, m, x, n)
		return
	}
	checkShapes("Pool.MatMulFast", dst, m, x, n)
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.qaBuf.Quantize(x, m.Cols)
	p.runQ(dst, m, &p.qaBuf)
}

// MatVecQ is MatVecQ split across the pool's threads.
func (p *Pool) MatVecQ(dst []float32, m *Matrix, qa *QActivation) {
	checkQShapes("Pool.MatVecQ", dst, m, qa, 1)
	p.lockedRunQ(dst, m, qa)
}

// MatMulQ is MatMulQ split across the pool's threads.
func (p *Pool) MatMulQ(dst []float32, m *Matrix, qa *QActivation) {
	checkQShapes("Pool.MatMulQ", dst, m, qa, qa.tokens)
	p.lockedRunQ(dst, m, qa)
}

func (p *Pool) lockedRunQ(dst []float32, m *Matrix, qa *QActivation) {
	if p == nil {
		qMatMulRows(dst, m, qa, 0, m.Rows)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runQ(dst, m, qa)
}

func (p *Pool) runQ(dst []float32, m *Matrix, qa *QActivation) {
	p.dst, p.m, p.qa = dst, m, qa
	p.split(m.Rows*m.Cols*qa.tokens < p.minWorkQ)
}

// split runs the current job on up to Threads() threads, one contiguous span
// of rows each, or on the caller alone when serial. Called under mu.
func (p *Pool) split(serial bool) {
	rows := p.m.Rows
	threads := min(len(p.helpers)+1, rows)
	if serial || threads <= 1 {
		p.compute(0, rows)
	} else {
		for t, h := range p.helpers {
			lo, hi := rows*(t+1)/threads, rows*(t+2)/threads
			if t+1 >= threads {
				lo, hi = 0, 0
			}
			h.span = span{lo, hi}
		}
		p.publish()
		p.compute(0, rows/threads)
		p.awaitHelpers()
	}
	// Drop the references so a finished job does not pin caller memory.
	p.dst, p.m, p.x, p.sumX, p.qa = nil, nil, nil, nil, nil
}
