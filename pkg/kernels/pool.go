package kernels

import (
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs MatVec and MatMul on persistent worker goroutines. Each output
// element is still produced by the single-threaded code, so results are
// bitwise identical for any thread count and any split. A nil *Pool
// computes on the caller's goroutine. Calls on one Pool are serialised; use
// one Pool per decoding goroutine.
//
// Work split: a job's rows (of one matrix, or of several matrices sharing
// one input, see MatMulFastMulti) form one index space, cut into one
// contiguous range per thread. Each thread eats its own range chunk by
// chunk from the front and, when it is empty, steals chunks from the back of
// the others' ranges. On an idle machine every thread streams its own
// contiguous range as a static split would; on a shared one a thread the
// OS has descheduled no longer holds half the job hostage.
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
	helpers  []*helper     // the caller is worker 0 and computes too
	minWork  int           // below this many weight·row products, stay single-threaded
	minWorkQ int           // the same for the integer path, which is several times faster
	spin     time.Duration // how long to spin before parking; 0 when helpers cannot all run at once

	seq     atomic.Uint32 // job number: helpers run a job when it changes
	pending atomic.Int32  // helpers still on the current job
	waiting atomic.Bool   // the caller is parked on done
	done    chan struct{} // wakes a parked caller (capacity 1)
	stop    bool          // set with the last seq bump by Close

	// The current job, written under mu before seq is bumped (the atomic
	// orders these writes before the helpers read them).
	job    job
	ranges []rowRange // one per thread
	chunk  int        // rows taken at a time
	active int        // threads taking part in the job

	sumBuf   []float32
	qaBuf    QActivation   // the Fast entry points quantize x here, once per call
	qaEach   []QActivation // MatVecFastEach: one quantized input per matrix
	partsBuf []jobPart

	handoffs atomic.Uint64 // jobs handed to the helpers (not run serially)
	parks    atomic.Uint64 // times a helper or the caller parked instead of spinning
}

// job is one parallel product or loop. Rows [offs[i], offs[i+1]) of the
// index space are rows of parts[i].
type job struct {
	parts []jobPart
	total int
	x     []float32    // float input: n rows of Cols values
	n     int          // input rows (tokens)
	sumX  []float32    // Σx per group: the float reference over Q4/Q8 (MatVec, MatMul)
	qa    *QActivation // the integer path for Q4/Q8 parts (Fast and Q entry points)
	loop  func(worker, lo, hi int)
}

type jobPart struct {
	dst    []float32
	m      *Matrix
	lo, hi int          // its rows in the job's index space
	qa     *QActivation // this part's own input (MatVecFastEach); nil: the job's
}

type helper struct {
	sleeping atomic.Bool   // parked on wake
	wake     chan struct{} // capacity 1; a stale token only causes a re-check
}

// rowRange is a thread's remaining rows [front, back), packed front<<32 |
// back so owner and thieves claim chunks with one compare-and-swap; padded
// to its own cache line.
type rowRange struct {
	v atomic.Uint64
	_ [56]byte
}

// minParallelWork is the number of weight×input products below which a Pool
// does not wake its helpers: waking a parked helper costs microseconds,
// which the pure-Go kernel spends on roughly this much work.
const minParallelWork = 1 << 14

// minParallelWorkQ is minParallelWork for the integer path, which streams
// weights at memory speed.
const minParallelWorkQ = 1 << 16

// chunkBytes is the least weight bytes a thread claims at a time: large
// enough that the claim (an atomic) and the kernel call vanish beside it,
// small enough that a stalled thread leaves little for the others to wait
// on. A job is also cut into at least chunksPerThread chunks per thread.
const (
	chunkBytes      = 32 << 10
	chunksPerThread = 16
)

// maxChunkBytes caps a single-token chunk: a job ends when its last chunk
// does, so the other threads wait up to one chunk's time at the barrier.
// Uncapped, a 1/32 share of the 540 MB lm_head was a 17 MB chunk (~0.8 ms);
// the fused expert jobs' 280 KiB chunks left ~14 µs per job.
const maxChunkBytes = 128 << 10

// spinTime bounds the busy wait before parking. It must outlast the gap
// between a token's products (serial norms, routing, recurrences: tens of
// µs), because a parked thread's wake-up is slow: on the 2-vCPU dev VM a
// helper woken through a channel started its share 115–190 µs late
// (BenchmarkPoolWake), and with a 10–20 µs spin decode parked ~50 times a
// token. 200 µs cut that to ~1 and still hands the cores back almost at
// once when decoding stops. NVMAI_POOL_SPIN_US overrides it (0 parks at
// once: for machines shared with other work). Every pollsPerYield polls
// the spinner calls runtime.Gosched and looks at the clock.
const (
	spinTime      = 200 * time.Microsecond
	pollsPerYield = 32
)

func spinSetting() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("NVMAI_POOL_SPIN_US")); err == nil && v >= 0 {
		return time.Duration(v) * time.Microsecond
	}
	return spinTime
}

// NewPool starts threads−1 helper goroutines (the caller is the remaining
// thread). threads < 1 means runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool {
	if threads < 1 {
		threads = runtime.GOMAXPROCS(0)
	}
	spin := spinSetting()
	if runtime.GOMAXPROCS(0) < threads {
		spin = 0 // a spinner could hold the P its peer needs
	}
	return newPool(threads, spin)
}

func newPool(threads int, spin time.Duration) *Pool {
	p := &Pool{done: make(chan struct{}, 1), minWork: minParallelWork, minWorkQ: minParallelWorkQ, spin: spin,
		ranges: make([]rowRange, threads)}
	for w := range threads - 1 {
		h := &helper{wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		go p.serve(h, w+1)
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

// Handoffs is the number of jobs the pool has split across its threads so
// far (each costs a wake-up and a barrier); products too small to split and
// a single-threaded pool's work are not counted.
func (p *Pool) Handoffs() uint64 {
	if p == nil {
		return 0
	}
	return p.handoffs.Load()
}

// Parks is how many times a helper (between jobs) or the caller (waiting
// for helpers) has parked on a channel after its spin ran out; each later
// costs a wake-up, which on a virtual machine can take 100 µs.
func (p *Pool) Parks() uint64 {
	if p == nil {
		return 0
	}
	return p.parks.Load()
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

func (p *Pool) serve(h *helper, worker int) {
	var last uint32
	for {
		last = p.awaitJob(h, last)
		if p.stop {
			return
		}
		if worker < p.active {
			p.work(worker)
		}
		if p.pending.Add(-1) == 0 && p.waiting.Load() {
			notify(p.done)
			runtime.Gosched() // let the caller, queued on this P, run now
		}
	}
}

// awaitJob returns the next job number after last, spinning then parking.
func (p *Pool) awaitJob(h *helper, last uint32) uint32 {
	if p.spinFor(func() bool { return p.seq.Load() != last }) {
		return p.seq.Load()
	}
	for {
		h.sleeping.Store(true)
		if s := p.seq.Load(); s != last {
			h.sleeping.Store(false)
			return s
		}
		p.parks.Add(1)
		park(h.wake)
		h.sleeping.Store(false)
	}
}

// spinFor polls ready for up to p.spin and reports whether it came true.
func (p *Pool) spinFor(ready func() bool) bool {
	if p.spin <= 0 {
		return false
	}
	var start time.Time
	for i := 1; ; i++ {
		if ready() {
			return true
		}
		if i%pollsPerYield == 0 {
			runtime.Gosched()
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > p.spin {
				return false
			}
		}
	}
}

// publish starts the job whose fields and ranges are set: every helper looks
// at it (those past active only report back).
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
	if p.spinFor(func() bool { return p.pending.Load() == 0 }) {
		return
	}
	for {
		p.waiting.Store(true)
		if p.pending.Load() == 0 {
			p.waiting.Store(false)
			return
		}
		p.parks.Add(1)
		park(p.done)
		p.waiting.Store(false)
	}
}

// parkRecheck bounds how long a parked goroutine sleeps before it checks
// its condition again by itself.
const parkRecheck = 20 * time.Millisecond

// park waits for a token on ch, or at most parkRecheck: the callers loop and
// re-check their condition, so a lost wakeup costs a delay instead of a
// deadlock. The flag-then-check handshake relies on sequentially consistent
// atomics (a store, then a load of another variable, must not be reordered);
// the arm64 kernels, tested under qemu user emulation on x86, deadlocked
// there once with every goroutine parked, which this bound turns into a
// 20 ms stall.
func park(ch chan struct{}) {
	t := time.NewTimer(parkRecheck)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
}

// notify leaves a token in a capacity-1 channel unless one is already there.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// work runs worker's own range, then steals from the others' until every
// range is empty.
func (p *Pool) work(worker int) {
	own := &p.ranges[worker]
	for {
		lo, hi, ok := own.takeFront(p.chunk)
		if !ok {
			break
		}
		p.compute(worker, lo, hi)
	}
	for i := 1; i < p.active; i++ {
		victim := &p.ranges[(worker+i)%p.active]
		for {
			lo, hi, ok := victim.takeBack(p.chunk)
			if !ok {
				break
			}
			p.compute(worker, lo, hi)
		}
	}
}

func (r *rowRange) set(front, back int) { r.v.Store(uint64(front)<<32 | uint64(back)) }

func (r *rowRange) takeFront(chunk int) (lo, hi int, ok bool) {
	for {
		v := r.v.Load()
		front, back := int(v>>32), int(uint32(v))
		if front >= back {
			return 0, 0, false
		}
		n := min(chunk, back-front)
		if r.v.CompareAndSwap(v, uint64(front+n)<<32|uint64(back)) {
			return front, front + n, true
		}
	}
}

func (r *rowRange) takeBack(chunk int) (lo, hi int, ok bool) {
	for {
		v := r.v.Load()
		front, back := int(v>>32), int(uint32(v))
		if front >= back {
			return 0, 0, false
		}
		n := min(chunk, back-front)
		if r.v.CompareAndSwap(v, uint64(front)<<32|uint64(back-n)) {
			return back - n, back, true
		}
	}
}

// compute runs index rows [lo, hi) of the current job.
func (p *Pool) compute(worker, lo, hi int) {
	j := &p.job
	if j.loop != nil {
		j.loop(worker, lo, hi)
		return
	}
	for i := range j.parts {
		part := &j.parts[i]
		a, b := max(lo, part.lo), min(hi, part.hi)
		if a >= b {
			continue
		}
		a, b = a-part.lo, b-part.lo
		if part.qa != nil {
			qMatMulRows(part.dst, part.m, part.qa, a, b)
		} else if j.qa != nil && part.m.Enc.quantized() {
			qMatMulRows(part.dst, part.m, j.qa, a, b)
		} else {
			matMulRows(part.dst, part.m, j.x, j.n, j.sumX, a, b)
		}
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
	p.setParts([]*Matrix{m}, [][]float32{dst})
	p.job.x, p.job.n, p.job.sumX = x, n, sumX
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
	p.quantize(&p.qaBuf, x, m.Cols, []*Matrix{m})
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
	p.quantize(&p.qaBuf, x, m.Cols, []*Matrix{m})
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
	p.setParts([]*Matrix{m}, [][]float32{dst})
	p.job.qa = qa
	p.split(m.Rows*m.Cols*qa.tokens < p.minWorkQ)
}

// setParts lays the matrices out in the job's index space. Called under mu.
func (p *Pool) setParts(ms []*Matrix, dsts [][]float32) {
	parts := p.partsBuf[:0]
	total := 0
	for i, m := range ms {
		parts = append(parts, jobPart{dst: dsts[i], m: m, lo: total, hi: total + m.Rows})
		total += m.Rows
	}
	p.partsBuf = parts
	p.job.parts, p.job.total = parts, total
}

// split runs the current job on up to Threads() threads, or on the caller
// alone when serial. Called under mu.
func (p *Pool) split(serial bool) {
	j := &p.job
	total := j.total
	threads := min(len(p.helpers)+1, total)
	if serial || threads <= 1 {
		p.compute(0, 0, total)
	} else {
		p.active = threads
		p.chunk = p.chunkRows(threads)
		// Range boundaries of products on multiples of 8 rows keep the
		// row-pair kernels on even spans.
		align := ^7
		if j.loop != nil {
			align = ^0
		}
		for t := range threads {
			lo, hi := (total*t/threads)&align, (total*(t+1)/threads)&align
			if t == threads-1 {
				hi = total
			}
			p.ranges[t].set(lo, hi)
		}
		p.handoffs.Add(1)
		p.publish()
		p.work(0)
		p.awaitHelpers()
	}
	// Drop the references so a finished job does not pin caller memory.
	p.job = job{}
	clear(p.partsBuf)
}

// chunkRows is how many rows a thread claims at a time: a 1/chunksPerThread
// share of a thread's range, but at least chunkBytes and at most
// maxChunkBytes of weights (a multiple of 8 rows); batched products claim
// whole L2 row chunks of qMatMulRows, a multiple of 16 rows (the AMX
// batched kernel's block).
// A Parallel loop claims whole ranges (its indices are heads, each much
// work, and a span of heads may share reads).
func (p *Pool) chunkRows(threads int) int {
	j := &p.job
	if j.loop != nil {
		return (j.total + threads - 1) / threads
	}
	rowBytes := 1
	for _, part := range j.parts {
		rowBytes = max(rowBytes, weightRowBytes(part.m))
	}
	rows := max(chunkBytes/rowBytes, min(j.total/(threads*chunksPerThread), maxChunkBytes/rowBytes))
	if j.n > 1 || (j.qa != nil && j.qa.tokens > 1) {
		rows = max(rows, matMulChunkBytes/rowBytes)
		return (rows + 15) &^ 15
	}
	return (rows + 7) &^ 7
}

func weightRowBytes(m *Matrix) int {
	switch m.Enc {
	case Q4, Q8:
		return qRowBytes(m)
	case F32:
		return 4 * m.Cols
	}
	return 2 * m.Cols
}
