package qwen35

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// gdnScratch holds the per-chunk buffers of a Gated DeltaNet layer.
type gdnScratch struct {
	proj    []float32 // m: pre-conv projections [T, C]
	conv    []float32 // m': after conv and silu [T, C]
	z       []float32 // [T, Hv·Dv]
	b, a    []float32 // [T, Hv]
	o       []float32 // gated-normed outputs [T, Hv·Dv]
	workers []gdnWorker
	prof    *StepProfile
}

// gdnWorker is one thread's scratch for the recurrence.
type gdnWorker struct {
	q, k []float32 // one token's normalised q and k for one key head [Dk]
}

// gdnMixer is docs/qwen35-architecture.md §3.3 for T tokens, continuing the
// layer's conv window and recurrent state in ls. The recurrence runs token by
// token, so a chunk computes exactly what T single-token calls compute.
func (m *Model) gdnMixer(w *gdnWeights, ls *layerState, sc *gdnScratch, u, out []float32, T int) {
	c := &m.cfg
	C, Hv, vd := c.ConvChannels(), c.LinearValueHeads, c.valueDim()
	proj := grow(&sc.proj, T*C)
	z := grow(&sc.z, T*vd)
	b := grow(&sc.b, T*Hv)
	a := grow(&sc.a, T*Hv)
	m.matmulMulti([][]float32{proj, z, b, a}, []*kernels.Matrix{w.qkv, w.z, w.b, w.a}, u, T)
	sc.prof.markProducts(PhaseGDNProjections, w.qkv, w.z, w.b, w.a)

	conv := grow(&sc.conv, T*C)
	m.causalConv(w.conv, ls.conv, proj, conv, T)
	sc.prof.mark(PhaseGDNConv, int64(4*(len(ls.conv)+len(w.conv))))

	o := grow(&sc.o, T*vd)
	sc.workers = workerSlots(sc.workers, m.pool.Threads())
	m.parallelHeads(Hv, func(worker, lo, hi int) {
		m.gdnHeads(w, ls, &sc.workers[worker], conv, z, a, b, o, T, lo, hi)
	})
	sc.prof.mark(PhaseGDNHeads, int64(4*len(ls.rec)))
	m.matmul(out, w.out, o, T)
	sc.prof.markProducts(PhaseGDNOut, w.out)
}

// gdnHeads runs the gated delta rule and the gated norm for value heads
// [lo, hi) over the chunk's T tokens. Each value head normalises its own
// copy of its key head's q and k: redundant when Hv > Hk, but it keeps the
// heads independent, and costs Dk per head against Dk·Dv for the state.
func (m *Model) gdnHeads(w *gdnWeights, ls *layerState, sc *gdnWorker, conv, z, a, b, o []float32, T, lo, hi int) {
	c := &m.cfg
	C, Hv, Dv, Dk := c.ConvChannels(), c.LinearValueHeads, c.LinearValueDim, c.LinearKeyDim
	kd, vd := c.keyDim(), c.valueDim()
	ratio := Hv / c.LinearKeyHeads
	qScale := float32(1 / math.Sqrt(float64(Dk)))
	q := grow(&sc.q, Dk)
	k := grow(&sc.k, Dk)
	step := deltaStep{q: q, k: k}
	for t := range T {
		row := conv[t*C : (t+1)*C]
		for h := lo; h < hi; h++ {
			kh := h / ratio // repeat-interleave: value heads 0…r−1 share key head 0
			l2NormScaled(q, row[kh*Dk:(kh+1)*Dk], qScale)
			l2NormScaled(k, row[kd+kh*Dk:kd+(kh+1)*Dk], 1)
			g := w.negExpA[h] * softplus32(a[t*Hv+h]+w.dtBias[h])
			step.S = ls.rec[h*Dk*Dv : (h+1)*Dk*Dv]
			step.v = row[2*kd+h*Dv : 2*kd+(h+1)*Dv]
			step.decay = exp32(g)
			step.beta = sigmoid32(b[t*Hv+h])
			oh := o[t*vd+h*Dv : t*vd+(h+1)*Dv]
			step.run(oh)
			gatedNorm(oh, z[t*vd+h*Dv:t*vd+(h+1)*Dv], w.norm, c.RMSNormEps)
		}
	}
}

// causalConv is the depthwise causal conv with silu over the projections of
// a chunk, reading the K−1 previous projections from state, then leaves the
// last K−1 projections in state for the next chunk. Channels are
// independent, so the pool's threads split them.
func (m *Model) causalConv(weight, state []float32, proj, dst []float32, T int) {
	C, K := m.cfg.ConvChannels(), m.cfg.ConvKernel
	// source returns the projection of chunk-relative token s (s < 0: from
	// the state, whose last row is token −1).
	source := func(s int) []float32 {
		if s >= 0 {
			return proj[s*C : (s+1)*C]
		}
		r := K - 1 + s
		return state[r*C : (r+1)*C]
	}
	m.pool.Parallel(C, func(_, lo, hi int) {
		var stack [8][]float32
		window := stack[:0]
		if K > len(stack) {
			window = make([][]float32, 0, K)
		}
		for t := range T {
			window = window[:0]
			for j := range K {
				window = append(window, source(t - (K - 1) + j)[lo:hi]) // tap K−1 is the current token
			}
			d := dst[t*C+lo : t*C+hi]
			convTaps(d, weight[lo*K:hi*K], window)
			kernels.SiLU(d, d)
		}
	})
	// Row r takes token T−(K−1)+r; a row still in the state moves to a lower
	// index, so ascending order reads every row before it is overwritten.
	for r := range K - 1 {
		copy(state[r*C:(r+1)*C], source(T-(K-1)+r))
	}
}

// convTaps sets d[i] = Σ_j w[i·K+j]·window[j][i] for K = len(window) taps,
// each product rounded to float32 and summed in tap order from zero.
func convTaps(d, w []float32, window [][]float32) {
	if len(window) == 4 {
		convTaps4(d, w, window[0], window[1], window[2], window[3])
		return
	}
	K := len(window)
	for i := range d {
		taps := w[i*K : (i+1)*K]
		var acc float32
		for j, wj := range taps {
			acc += float32(wj * window[j][i])
		}
		d[i] = acc
	}
}

// convTaps4 is convTaps for the K = 4 of every published Qwen3.5 config,
// with the bounds checks hoisted out of the loop.
func convTaps4(d, w, x0, x1, x2, x3 []float32) {
	n := len(d)
	w, x0, x1, x2, x3 = w[:4*n], x0[:n], x1[:n], x2[:n], x3[:n]
	for i := range d {
		ws := w[4*i : 4*i+4 : 4*i+4]
		var acc float32
		acc += float32(ws[0] * x0[i])
		acc += float32(ws[1] * x1[i])
		acc += float32(ws[2] * x2[i])
		acc += float32(ws[3] * x3[i])
		d[i] = acc
	}
}

// deltaStep is one token of the gated delta rule for one value head.
type deltaStep struct {
	S           []float32 // [Dk, Dv], updated in place
	q, k, v     []float32
	decay, beta float32
}

// run does S ← decay·S; p = Sᵀk; δ = β(v − p); S ← S + k⊗δ; o = Sᵀq, with
// every sum over the key index in ascending order, each product and sum
// rounded on its own (kernels.DeltaRule, one pass over S per column block).
func (d *deltaStep) run(o []float32) {
	kernels.DeltaRule(d.S, d.decay, d.beta, d.k, d.v, d.q, o[:len(d.v)])
}

// gatedNorm is the GDN output norm over one head: x / rms(x) · w · silu(z),
// with a plain w (not 1+w), in place; z (scratch) is overwritten by silu(z).
func gatedNorm(x, z, w []float32, eps float32) {
	inv := invRMS(x, eps)
	kernels.SiLU(z, z)
	for i, v := range x {
		x[i] = w[i] * (v * inv) * z[i]
	}
}
