package blocks

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// GDN runs Gated DeltaNet layers of one geometry.
type GDN struct {
	Pool                 *kernels.Pool
	KeyHeads, ValueHeads int // Hk, Hv (Hv a multiple of Hk)
	KeyDim, ValueDim     int // Dk, Dv
	Kernel               int // K, the causal conv taps
	Eps                  float32
	SigmoidGate          bool // gated norm with sigmoid(z) (qwen38) instead of silu(z)
}

// Channels is C = 2·Hk·Dk + Hv·Dv, the width of in_proj_qkv and of the conv.
func (g *GDN) Channels() int { return 2*g.KeyHeads*g.KeyDim + g.ValueHeads*g.ValueDim }

// GDNWeights are one Gated DeltaNet layer's tensors.
type GDNWeights struct {
	QKV, Z, B, A, Out *kernels.Matrix
	Conv              []float32 // [C, K]
	NegExpA           []float32 // −exp(A_log) per value head
	DtBias            []float32
	Norm              []float32 // plain w of the gated norm
}

// GrowingBytes is the memory of the buffers that grow with the pass length.
func (sc *GDNScratch) GrowingBytes() int64 {
	var n int
	for _, b := range [][]float32{sc.proj, sc.conv, sc.z, sc.b, sc.a, sc.o} {
		n += 4 * cap(b)
	}
	return int64(n)
}

// GDNScratch holds the per-chunk buffers of a Gated DeltaNet layer.
type GDNScratch struct {
	proj    []float32 // m: pre-conv projections [T, C]
	conv    []float32 // m': after conv and silu [T, C]
	z       []float32 // [T, Hv·Dv]
	b, a    []float32 // [T, Hv]
	o       []float32 // gated-normed outputs [T, Hv·Dv]
	workers []gdnWorker
	Prof    *model.StepProfile // the state's profile during a decode step, else nil
}

// gdnWorker is one thread's scratch for the recurrence.
type gdnWorker struct {
	q, k []float32 // one token's normalised q and k for one key head [Dk]
}

// Mixer is docs/qwen35-architecture.md §3.3 for T tokens (qwen38 §3.5 with
// SigmoidGate), continuing the layer's conv window conv [K−1, C] and
// recurrent state rec [Hv, Dk, Dv]. The recurrence runs token by token, so a
// chunk computes exactly what T single-token calls compute.
//
// It is Project, Recur and Output in turn. A batched decode step calls them
// itself: Project and Output over one row per sequence, so each weight
// matrix is read once for the batch, and Recur on each sequence's row with
// that sequence's state.
func (g *GDN) Mixer(w *GDNWeights, conv, rec []float32, sc *GDNScratch, u, out []float32, T int) {
	g.Project(w, sc, u, T)
	g.Recur(w, conv, rec, sc, 0, T)
	g.Output(w, sc, out, T)
}

// Project computes the input projections (in_proj_qkv, z, b, a) of the T
// rows of u [T, H] into sc and sizes sc's other buffers for T rows. The
// rows need not be one sequence's: each row's products are the bits it gets
// alone (the kernels contract that makes chunking invisible).
func (g *GDN) Project(w *GDNWeights, sc *GDNScratch, u []float32, T int) {
	C, Hv, vd := g.Channels(), g.ValueHeads, g.ValueHeads*g.ValueDim
	proj := Grow(&sc.proj, T*C)
	z := Grow(&sc.z, T*vd)
	b := Grow(&sc.b, T*Hv)
	a := Grow(&sc.a, T*Hv)
	Grow(&sc.conv, T*C)
	Grow(&sc.o, T*vd)
	MatMulMulti(g.Pool, [][]float32{proj, z, b, a}, []*kernels.Matrix{w.QKV, w.Z, w.B, w.A}, u, T)
	sc.Prof.MarkProducts(model.PhaseGDNProjections, w.QKV, w.Z, w.B, w.A)
}

// Recur runs the causal conv, the gated delta rule and the gated norm on
// rows [r0, r0+n) of the last Project, consecutive tokens of the one
// sequence whose conv window and recurrent state are conv and rec, leaving
// their gated-normed outputs for Output.
func (g *GDN) Recur(w *GDNWeights, conv, rec []float32, sc *GDNScratch, r0, n int) {
	C, Hv, vd := g.Channels(), g.ValueHeads, g.ValueHeads*g.ValueDim
	proj, mc := sc.proj[r0*C:(r0+n)*C], sc.conv[r0*C:(r0+n)*C]
	CausalConv(g.Pool, C, g.Kernel, w.Conv, conv, proj, mc, n)
	sc.Prof.Mark(model.PhaseGDNConv, int64(4*(len(conv)+len(w.Conv))))

	z, o := sc.z[r0*vd:(r0+n)*vd], sc.o[r0*vd:(r0+n)*vd]
	b, a := sc.b[r0*Hv:(r0+n)*Hv], sc.a[r0*Hv:(r0+n)*Hv]
	sc.workers = WorkerSlots(sc.workers, g.Pool.Threads())
	g.Pool.Parallel(Hv, func(worker, lo, hi int) {
		g.heads(w, rec, &sc.workers[worker], mc, z, a, b, o, n, lo, hi)
	})
	sc.Prof.Mark(model.PhaseGDNHeads, int64(4*len(rec)))
}

// Output computes out [T, H] from the T rows Recur left, over every row of
// the last Project at once.
func (g *GDN) Output(w *GDNWeights, sc *GDNScratch, out []float32, T int) {
	MatMul(g.Pool, out, w.Out, sc.o[:T*g.ValueHeads*g.ValueDim], T)
	sc.Prof.MarkProducts(model.PhaseGDNOut, w.Out)
}

// heads runs the gated delta rule and the gated norm for value heads
// [lo, hi) over the chunk's T tokens. Each value head normalises its own
// copy of its key head's q and k: redundant when Hv > Hk, but it keeps the
// heads independent, and costs Dk per head against Dk·Dv for the state.
func (g *GDN) heads(w *GDNWeights, rec []float32, sc *gdnWorker, conv, z, a, b, o []float32, T, lo, hi int) {
	C, Hv, Dv, Dk := g.Channels(), g.ValueHeads, g.ValueDim, g.KeyDim
	kd, vd := g.KeyHeads*Dk, Hv*Dv
	ratio := Hv / g.KeyHeads
	qScale := float32(1 / math.Sqrt(float64(Dk)))
	q := Grow(&sc.q, Dk)
	k := Grow(&sc.k, Dk)
	step := DeltaStep{Q: q, K: k}
	// Head by head, each over every token: a head's state (Dk·Dv floats,
	// 64 KiB for Qwen3.5-35B-A3B) then stays in L2 for the whole chunk,
	// where token by token over the heads every token streamed all of the
	// thread's heads' states (1 MiB) through the caches. The heads are
	// independent, so the order between them changes no result.
	for h := lo; h < hi; h++ {
		for t := range T {
			row := conv[t*C : (t+1)*C]
			kh := h / ratio // repeat-interleave: value heads 0…r−1 share key head 0
			L2NormScaled(q, row[kh*Dk:(kh+1)*Dk], qScale)
			L2NormScaled(k, row[kd+kh*Dk:kd+(kh+1)*Dk], 1)
			gh := w.NegExpA[h] * Softplus32(a[t*Hv+h]+w.DtBias[h])
			step.S = rec[h*Dk*Dv : (h+1)*Dk*Dv]
			step.V = row[2*kd+h*Dv : 2*kd+(h+1)*Dv]
			step.Decay = Exp32(gh)
			step.Beta = Sigmoid32(b[t*Hv+h])
			oh := o[t*vd+h*Dv : t*vd+(h+1)*Dv]
			if t+1 < T {
				step.RunAgain(oh)
			} else {
				step.Run(oh) // the next head's state follows
			}
			if g.SigmoidGate {
				GatedNormSigmoid(oh, z[t*vd+h*Dv:t*vd+(h+1)*Dv], w.Norm, g.Eps)
			} else {
				GatedNorm(oh, z[t*vd+h*Dv:t*vd+(h+1)*Dv], w.Norm, g.Eps)
			}
		}
	}
}
