package qwen35

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// attnScratch holds the per-chunk buffers of a full-attention layer.
type attnScratch struct {
	q2        []float32 // q_proj output [T, Hq·2·Dh]: per head, query then gate
	k, v      []float32 // [T, Hkv·Dh]
	o         []float32 // gated attention output [T, Hq·Dh]
	kRow      []float32 // one token's normed, rotated keys [Hkv·Dh] before a below-float32 cache stores them
	qAll      []float32 // attnSplit: every head's normed, rotated query [Hq, Dh]
	scoresAll []float32 // attnSplit: one KV head's group of scores [heads, positions]
	workers   []attnWorker
	prof      *StepProfile
}

// attnWorker is one thread's scratch for the per-head attention.
type attnWorker struct {
	q      []float32 // the normed, rotated queries of one head group [heads, Dh]
	scores []float32 // their scores, then weights [heads, positions attended]
	qi     []float32 // the queries interleaved for kernels.AttendScores [heads, Dh]
	tile   []float32 // kernels.AttendScratch for a cache below float32
}

// attnMixer is docs/qwen35-architecture.md §3.4 for T tokens at positions
// pos0…pos0+T−1. It first appends the chunk's keys and values to the cache,
// then lets each token attend to the cache up to itself, so token t sees
// the same keys in the same order whatever the chunking.
func (m *Model) attnMixer(w *attnWeights, ls *layerState, sc *attnScratch, ws *workspace, pos0 int, u, out []float32, T int) {
	c := &m.cfg
	Hq, Hkv, Dh := c.NumHeads, c.NumKVHeads, c.HeadDim
	kvd := c.kvDim()
	half := c.RotaryDim / 2
	q2 := grow(&sc.q2, T*2*Hq*Dh)
	k := grow(&sc.k, T*kvd)
	v := grow(&sc.v, T*kvd)
	m.matmulMulti([][]float32{q2, k, v}, []*kernels.Matrix{w.q, w.k, w.v}, u, T)
	sc.prof.markProducts(PhaseAttnProjections, w.q, w.k, w.v)

	// Keys are quantized after k_norm and RoPE, values as projected; a
	// float32 cache takes the keys in place.
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		dstK := ls.kv.keyRowF32(pos0 + t)
		if dstK == nil {
			dstK = grow(&sc.kRow, kvd)
		}
		for g := range Hkv {
			kh := dstK[g*Dh : (g+1)*Dh]
			rmsNorm(kh, k[t*kvd+g*Dh:t*kvd+(g+1)*Dh], w.kNorm, c.RMSNormEps)
			rotate(kh, cos, sin)
		}
		if ls.kv.f32() {
			copy(ls.kv.v.f32[(pos0+t)*kvd:(pos0+t+1)*kvd], v[t*kvd:(t+1)*kvd])
		} else {
			ls.kv.putKV(pos0+t, dstK, v[t*kvd:(t+1)*kvd])
		}
	}

	o := grow(&sc.o, T*Hq*Dh)
	sc.workers = workerSlots(sc.workers, m.pool.Threads())
	if m.splitAttention(pos0+T, T) {
		m.attnSplit(w, ls, sc, ws, pos0, q2, o)
	} else {
		m.parallelHeads(Hq, func(worker, lo, hi int) {
			m.attnHeads(w, ls, &sc.workers[worker], ws, pos0, q2, o, T, lo, hi)
		})
	}
	sc.prof.mark(PhaseAttnHeads, int64(pos0+T)*c.KVBytesPerToken(ls.kv.bits))
	m.matmul(out, w.o, o, T)
	sc.prof.markProducts(PhaseAttnOut, w.o)
}

// attnHeads computes the gated attention output of query heads [lo, hi)
// for the chunk's T tokens, whose keys and values are already cached. Heads
// of the span that share a KV head attend together, so each cached key and
// value row is read once per group rather than once per head; every head's
// own arithmetic is the same whatever the grouping.
func (m *Model) attnHeads(w *attnWeights, ls *layerState, sc *attnWorker, ws *workspace, pos0 int, q2, o []float32, T, lo, hi int) {
	c := &m.cfg
	Hq, Dh := c.NumHeads, c.HeadDim
	half := c.RotaryDim / 2
	group := Hq / c.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(Dh)))
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		n := pos0 + t + 1 // causal: the cache up to and including this token
		for h := lo; h < hi; {
			g := h / group
			end := min(hi, (g+1)*group) // heads [h, end) read KV head g
			heads := end - h
			qs := grow(&sc.q, heads*Dh)
			for j := range heads {
				base := t*2*Hq*Dh + (h+j)*2*Dh
				q := qs[j*Dh : (j+1)*Dh]
				rmsNorm(q, q2[base:base+Dh], w.qNorm, c.RMSNormEps)
				rotate(q, cos, sin)
			}
			og := o[t*Hq*Dh+h*Dh : t*Hq*Dh+end*Dh]
			var tile []float32
			if !ls.kv.f32() {
				tile = grow(&sc.tile, kernels.AttendScratch(heads, Dh))
			}
			attendGroup(og, qs, ls.kv, g, n, scale, grow(&sc.scores, heads*n), grow(&sc.qi, heads*Dh), tile)
			for j := range heads {
				gate := q2[t*2*Hq*Dh+(h+j)*2*Dh+Dh:][:Dh]
				kernels.MulSigmoid(og[j*Dh:(j+1)*Dh], gate)
			}
			h = end
		}
	}
}

// rotate applies rotate-half RoPE to the first 2·len(cos) dims of x: pairs
// (j, j+half), the rest pass through.
func rotate(x, cos, sin []float32) {
	half := len(cos)
	for j := range half {
		x0, x1 := x[j], x[j+half]
		x[j] = x0*cos[j] - x1*sin[j]
		x[j+half] = x1*cos[j] + x0*sin[j]
	}
}

// attendGroup writes softmax(q·Kᵀ·scale)·V for each query of qs [heads, Dh]
// over the first n cached tokens of KV head g into o [heads, Dh]. Per head,
// every sum runs over positions in ascending order (kernels.AttendScores,
// kernels.AttendValues and their Q8/BF16 forms); scores is scratch
// [heads, n], qi [heads, Dh], tile kernels.AttendScratch (nil for a float32
// cache).
func attendGroup(o, qs []float32, kv *kvCache, g, n int, scale float32, scores, qi, tile []float32) {
	heads := len(qs) / kv.dh
	kv.scores(scores, qs, g, 0, n, scale, qi, tile)
	for j := range heads {
		softmaxInPlace(scores[j*n : (j+1)*n])
	}
	kv.values(o, scores, g, 0, kv.dh, n, tile)
}

// softmaxInPlace replaces x by softmax(x). The denominator is summed in
// float64: over a long context a float32 running sum would lose small terms.
func softmaxInPlace(x []float32) {
	maxV := float32(math.Inf(-1))
	for _, v := range x {
		maxV = max(maxV, v)
	}
	kernels.Exp(x, x, maxV)
	var sum float64
	for _, e := range x {
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}
