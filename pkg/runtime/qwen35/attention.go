package qwen35

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/runtime/blocks"
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
	q2 := blocks.Grow(&sc.q2, T*2*Hq*Dh)
	k := blocks.Grow(&sc.k, T*kvd)
	v := blocks.Grow(&sc.v, T*kvd)
	blocks.MatMulMulti(m.pool, [][]float32{q2, k, v}, []*kernels.Matrix{w.q, w.k, w.v}, u, T)
	sc.prof.MarkProducts(PhaseAttnProjections, w.q, w.k, w.v)

	// Keys are quantized after k_norm and RoPE, values as projected; a
	// float32 cache takes the keys in place.
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		dstK := ls.kv.keyRowF32(pos0 + t)
		if dstK == nil {
			dstK = blocks.Grow(&sc.kRow, kvd)
		}
		for g := range Hkv {
			kh := dstK[g*Dh : (g+1)*Dh]
			blocks.RMSNorm(kh, k[t*kvd+g*Dh:t*kvd+(g+1)*Dh], w.kNorm, c.RMSNormEps)
			blocks.Rotate(kh, cos, sin)
		}
		if ls.kv.f32() {
			copy(ls.kv.v.f32[(pos0+t)*kvd:(pos0+t+1)*kvd], v[t*kvd:(t+1)*kvd])
		} else {
			ls.kv.putKV(pos0+t, dstK, v[t*kvd:(t+1)*kvd])
		}
	}

	o := blocks.Grow(&sc.o, T*Hq*Dh)
	sc.workers = blocks.WorkerSlots(sc.workers, m.pool.Threads())
	if m.splitAttention(pos0+T, T) {
		m.attnSplit(w, ls, sc, ws, pos0, q2, o)
	} else {
		m.parallelHeads(Hq, func(worker, lo, hi int) {
			m.attnHeads(w, ls, &sc.workers[worker], ws, pos0, q2, o, T, lo, hi)
		})
	}
	sc.prof.Mark(PhaseAttnHeads, int64(pos0+T)*c.KVBytesPerToken(ls.kv.bits))
	blocks.MatMul(m.pool, out, w.o, o, T)
	sc.prof.MarkProducts(PhaseAttnOut, w.o)
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
			qs := blocks.Grow(&sc.q, heads*Dh)
			for j := range heads {
				base := t*2*Hq*Dh + (h+j)*2*Dh
				q := qs[j*Dh : (j+1)*Dh]
				blocks.RMSNorm(q, q2[base:base+Dh], w.qNorm, c.RMSNormEps)
				blocks.Rotate(q, cos, sin)
			}
			og := o[t*Hq*Dh+h*Dh : t*Hq*Dh+end*Dh]
			var tile []float32
			if !ls.kv.f32() {
				tile = blocks.Grow(&sc.tile, kernels.AttendScratch(heads, Dh))
			}
			attendGroup(og, qs, ls.kv, g, n, scale, blocks.Grow(&sc.scores, heads*n), blocks.Grow(&sc.qi, heads*Dh), tile)
			for j := range heads {
				gate := q2[t*2*Hq*Dh+(h+j)*2*Dh+Dh:][:Dh]
				kernels.MulSigmoid(og[j*Dh:(j+1)*Dh], gate)
			}
			h = end
		}
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
		blocks.SoftmaxInPlace(scores[j*n : (j+1)*n])
	}
	kv.values(o, scores, g, 0, kv.dh, n, tile)
}
