package kernels

import "fmt"

// MatMulFastMulti sets dsts[i] = ms[i]·x for every matrix, n activation rows
// of x each (all matrices have the same Cols), as one job: quantized
// matrices share one quantization of x and the pool's threads split the
// rows of all matrices together, so one hand-off serves them all. Each
// dsts[i] is bitwise what MatMulFast(dsts[i], ms[i], x, n) gives.
func (p *Pool) MatMulFastMulti(dsts [][]float32, ms []*Matrix, x []float32, n int) {
	if len(dsts) != len(ms) {
		panic(fmt.Sprintf("kernels.Pool.MatMulFastMulti: %d outputs for %d matrices", len(dsts), len(ms)))
	}
	work, quantized := 0, false
	for i, m := range ms {
		checkShapes("Pool.MatMulFastMulti", dsts[i], m, x, n)
		if m.Cols != ms[0].Cols {
			panic(fmt.Sprintf("kernels.Pool.MatMulFastMulti: matrix %d has %d columns, matrix 0 has %d; they must share the input", i, m.Cols, ms[0].Cols))
		}
		work += m.Rows * m.Cols * n
		quantized = quantized || m.Enc.quantized()
	}
	if p == nil || len(ms) == 0 || n == 0 {
		for i, m := range ms {
			MatMulFast(dsts[i], m, x, n)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	minWork := p.minWork
	if quantized {
		p.quantize(&p.qaBuf, x, ms[0].Cols, ms)
		minWork = p.minWorkQ
	}
	p.setParts(ms, dsts)
	p.job.x, p.job.n = x, n
	if quantized {
		p.job.qa = &p.qaBuf
	}
	p.split(work < minWork)
}

// parallelQuantizeTokens is the fewest tokens whose quantization the pool
// splits across its threads (a prefill pass's products; one expert's share
// of a long pass is some 64 tokens): below, waking the helpers costs about
// what the split saves.
const parallelQuantizeTokens = 32

// quantize is qa.Quantize(x, cols) split across the pool's threads by
// blocks of 16 tokens when there are enough tokens. Each thread also builds
// its blocks of the batched layouts that products with ms will read, which
// the first thread to need one would otherwise build whole while the others
// waited. Every value is the one Quantize and the layout's build give.
// Called under mu.
func (p *Pool) quantize(qa *QActivation, x []float32, cols int, ms []*Matrix) {
	tokens := 0
	if cols > 0 {
		tokens = len(x) / cols
	}
	if len(p.helpers) == 0 || tokens < parallelQuantizeTokens || cols%GroupSize != 0 || len(x)%cols != 0 {
		qa.Quantize(x, cols) // and its checks
		return
	}
	qa.resize(tokens, cols)
	var layouts [2]bool // Q4, Q8: batchLayout's indices
	for _, m := range ms {
		if m.Enc.quantized() && qBatchEnabled && tokens >= qBatchMinTokens(m.Enc) {
			layouts[boolIndex(m.Enc == Q8)] = true
		}
	}
	for i, want := range layouts {
		if want {
			qa.batch[i].size(qa)
		}
	}
	p.parallelLocked(qBatchBlocks(tokens), func(_, lo, hi int) {
		for tok := lo * qBatchLanes; tok < min(hi*qBatchLanes, tokens); tok++ {
			qa.quantizeToken(tok, x[tok*cols:(tok+1)*cols])
		}
		for i, want := range layouts {
			if want {
				qa.batch[i].buildBlocks(qa, [2]Encoding{Q4, Q8}[i], lo, hi)
			}
		}
	})
	qa.batchValid = layouts
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Parallel calls fn over the indices [0, n), split across the pool's
// threads like the rows of a product: every index is passed exactly once,
// in spans [lo, hi); worker (0 ≤ worker < Threads()) names the thread, and
// calls with the same worker never overlap, so fn may use per-worker
// scratch. A nil Pool calls fn(0, 0, n).
func (p *Pool) Parallel(n int, fn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	if p == nil {
		fn(0, 0, n)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parallelLocked(n, fn)
}

// parallelLocked is Parallel for a caller that holds mu.
func (p *Pool) parallelLocked(n int, fn func(worker, lo, hi int)) {
	p.job.loop, p.job.total = fn, n
	p.split(false)
}

// MatVecFastEach sets dsts[i] = ms[i]·xs[i] for every matrix, each with its
// own input vector, as one job: every xs[i] is quantized once and the
// pool's threads split the rows of all matrices together, so one hand-off
// serves them all (a MoE layer's expert down projections). Each dsts[i] is
// bitwise what MatVecFast(dsts[i], ms[i], xs[i]) gives. Matrices that are
// not Q4 or Q8 are multiplied one at a time.
func (p *Pool) MatVecFastEach(dsts [][]float32, ms []*Matrix, xs [][]float32) {
	if len(dsts) != len(ms) || len(xs) != len(ms) {
		panic(fmt.Sprintf("kernels.Pool.MatVecFastEach: %d outputs and %d inputs for %d matrices", len(dsts), len(xs), len(ms)))
	}
	for i, m := range ms {
		checkShapes("Pool.MatVecFastEach", dsts[i], m, xs[i], 1)
	}
	if p == nil || len(ms) < 2 || !allQuantized(ms) {
		for i, m := range ms {
			p.MatVecFast(dsts[i], m, xs[i])
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.qaEach) < len(ms) {
		p.qaEach = make([]QActivation, len(ms))
	}
	work := 0
	for i, m := range ms {
		p.qaEach[i].Quantize(xs[i], m.Cols)
		work += m.Rows * m.Cols
	}
	p.setParts(ms, dsts)
	for i := range p.job.parts {
		p.job.parts[i].qa = &p.qaEach[i]
	}
	p.split(work < p.minWorkQ)
}

func allQuantized(ms []*Matrix) bool {
	for _, m := range ms {
		if !m.Enc.quantized() {
			return false
		}
	}
	return true
}
