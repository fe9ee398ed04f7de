package blocks

import "github.com/nvmai/nvmai/pkg/kernels"

// CausalConv is the depthwise causal conv with silu over the C-channel
// projections of a chunk of T tokens, with K taps: it reads the K−1
// previous projections from state, then leaves the last K−1 projections in
// state for the next chunk. Channels are independent, so the pool's threads
// split them.
func CausalConv(pool *kernels.Pool, C, K int, weight, state []float32, proj, dst []float32, T int) {
	// source returns the projection of chunk-relative token s (s < 0: from
	// the state, whose last row is token −1).
	source := func(s int) []float32 {
		if s >= 0 {
			return proj[s*C : (s+1)*C]
		}
		r := K - 1 + s
		return state[r*C : (r+1)*C]
	}
	pool.Parallel(C, func(_, lo, hi int) {
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
			ConvTaps(d, weight[lo*K:hi*K], window)
			kernels.SiLU(d, d)
		}
	})
	// Row r takes token T−(K−1)+r; a row still in the state moves to a lower
	// index, so ascending order reads every row before it is overwritten.
	for r := range K - 1 {
		copy(state[r*C:(r+1)*C], source(T-(K-1)+r))
	}
}

// ConvTaps sets d[i] = Σ_j w[i·K+j]·window[j][i] for K = len(window) taps,
// each product rounded to float32 and summed in tap order from zero.
func ConvTaps(d, w []float32, window [][]float32) {
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

// convTaps4 is ConvTaps for the K = 4 of every published Qwen config,
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

// DeltaStep is one token of the gated delta rule for one value head.
type DeltaStep struct {
	S           []float32 // [Dk, Dv], updated in place
	Q, K, V     []float32
	Decay, Beta float32
}

// Run does S ← decay·S; p = Sᵀk; δ = β(v − p); S ← S + k⊗δ; o = Sᵀq, with
// every sum over the key index in ascending order, each product and sum
// rounded on its own (kernels.DeltaRule, one pass over S per column block).
func (d *DeltaStep) Run(o []float32) {
	kernels.DeltaRule(d.S, d.Decay, d.Beta, d.K, d.V, d.Q, o[:len(d.V)])
}

// RunAgain is Run for a step whose next step is the same head's (the state
// stays in cache: nothing to prefetch); the results are Run's.
func (d *DeltaStep) RunAgain(o []float32) {
	kernels.DeltaRuleSameHead(d.S, d.Decay, d.Beta, d.K, d.V, d.Q, o[:len(d.V)])
}

// GatedNorm is the GDN output norm over one head: x / rms(x) · w · silu(z),
// with a plain w (not 1+w), in place; z (scratch) is overwritten by silu(z).
func GatedNorm(x, z, w []float32, eps float32) {
	kernels.SiLU(z, z)
	gatedNormWith(x, z, w, eps)
}

// GatedNormSigmoid is GatedNorm with the sigmoid output gate
// (output_gate_type "sigmoid"); z is overwritten by sigmoid(z).
func GatedNormSigmoid(x, z, w []float32, eps float32) {
	kernels.Sigmoid(z, z)
	gatedNormWith(x, z, w, eps)
}

func gatedNormWith(x, act, w []float32, eps float32) {
	inv := InvRMS(x, eps)
	for i, v := range x {
		x[i] = w[i] * (v * inv) * act[i]
	}
}
