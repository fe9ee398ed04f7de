package qwen35

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
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
	prof      *model.StepProfile
}

// attnWorker is one thread's scratch for the per-head attention.
type attnWorker struct {
	q      []float32 // the normed, rotated queries of one head group, per token of a batch [tokens, heads, Dh]
	scores []float32 // their scores, then weights, per token [heads, positions attended]
	qi     []float32 // the queries interleaved for kernels.AttendScores [tokens, heads, Dh]
	tile   []float32 // kernels.AttendScratch for a cache below float32
	sets   attnSets  // a batch of tokens (attendGroupMulti)
}

// attnMixer is docs/qwen35-architecture.md §3.4 for T tokens at positions
// pos0…pos0+T−1. It first appends the chunk's keys and values to the cache,
// then lets each token attend to the cache up to itself, so token t sees
// the same keys in the same order whatever the chunking.
//
// It is attnProject, attnCore and attnOutput in turn. A batched decode step
// calls them itself: the products over one row per sequence, so each weight
// matrix is read once for the batch, and attnCore on each sequence's row
// with that sequence's cache and position.
func (m *Model) attnMixer(w *blocks.AttnWeights, ls *layerState, sc *attnScratch, ws *workspace, pos0 int, u, out []float32, T int) {
	m.attnProject(w, sc, u, T)
	m.attnCore(w, ls, sc, ws, pos0, 0, T)
	m.attnOutput(w, sc, out, T)
}

// attnProject computes q (with its gate), k and v of the T rows of u
// [T, H] into sc and sizes sc.o for T rows. The rows need not be one
// sequence's: each row's products are the bits it gets alone (the kernels
// contract that makes chunking invisible).
func (m *Model) attnProject(w *blocks.AttnWeights, sc *attnScratch, u []float32, T int) {
	c := &m.cfg
	qd, kvd := c.NumHeads*c.HeadDim, c.kvDim()
	q2 := blocks.Grow(&sc.q2, T*2*qd)
	k := blocks.Grow(&sc.k, T*kvd)
	v := blocks.Grow(&sc.v, T*kvd)
	blocks.Grow(&sc.o, T*qd)
	blocks.MatMulMulti(m.pool, [][]float32{q2, k, v}, []*kernels.Matrix{w.Q, w.K, w.V}, u, T)
	sc.prof.MarkProducts(model.PhaseAttnProjections, w.Q, w.K, w.V)
}

// attnCore is the attention of rows [r0, r0+T) of the last attnProject,
// the tokens at positions pos0…pos0+T−1 of the one sequence whose layer
// state is ls, with ws.cos/sin holding those T tokens' RoPE tables: k_norm
// and RoPE on its keys, which it appends to the cache with its values, then
// each token's attention, gated, into its rows of sc.o.
func (m *Model) attnCore(w *blocks.AttnWeights, ls *layerState, sc *attnScratch, ws *workspace, pos0, r0, T int) {
	c := &m.cfg
	Hkv, Dh := c.NumKVHeads, c.HeadDim
	qd, kvd := c.NumHeads*Dh, c.kvDim()
	half := c.RotaryDim / 2
	q2 := sc.q2[r0*2*qd : (r0+T)*2*qd]
	k, v := sc.k[r0*kvd:(r0+T)*kvd], sc.v[r0*kvd:(r0+T)*kvd]
	o := sc.o[r0*qd : (r0+T)*qd]

	// Keys are quantized after k_norm and RoPE, values as projected; a
	// float32 cache takes the keys in place.
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		dstK := ls.kv.KeyRowF32(pos0 + t)
		if dstK == nil {
			dstK = blocks.Grow(&sc.kRow, kvd)
		}
		for g := range Hkv {
			kh := dstK[g*Dh : (g+1)*Dh]
			blocks.RMSNorm(kh, k[t*kvd+g*Dh:t*kvd+(g+1)*Dh], w.KNorm, c.RMSNormEps)
			blocks.Rotate(kh, cos, sin)
		}
		if ls.kv.F32() {
			copy(ls.kv.ValueRowF32(pos0+t), v[t*kvd:(t+1)*kvd])
		} else {
			ls.kv.PutKV(pos0+t, dstK, v[t*kvd:(t+1)*kvd])
		}
	}

	sc.workers = blocks.WorkerSlots(sc.workers, m.pool.Threads())
	if m.splitAttention(pos0+T, T) {
		m.attnSplit(w, ls, sc, ws, pos0, q2, o)
	} else {
		m.parallelHeads(c.NumHeads, func(worker, lo, hi int) {
			m.attnHeads(w, ls, &sc.workers[worker], ws, pos0, q2, o, T, lo, hi)
		})
	}
	sc.prof.Mark(model.PhaseAttnHeads, int64(pos0+T)*c.KVBytesPerToken(ls.kv.Bits()))
}

// attnOutput computes out [T, H] from the T rows attnCore left, over every
// row of the last attnProject at once.
func (m *Model) attnOutput(w *blocks.AttnWeights, sc *attnScratch, out []float32, T int) {
	blocks.MatMul(m.pool, out, w.O, sc.o[:T*m.cfg.NumHeads*m.cfg.HeadDim], T)
	sc.prof.MarkProducts(model.PhaseAttnOut, w.O)
}

// attnHeads computes the gated attention output of query heads [lo, hi)
// for the chunk's T tokens, whose keys and values are already cached. Heads
// of the span that share a KV head attend together, so each cached key and
// value row is read once per group rather than once per head, and up to
// attnBatch tokens attend together (attendGroupMulti), so a cache below
// float32 is widened once per batch rather than once per token; every
// head's own arithmetic is the same whatever the grouping.
func (m *Model) attnHeads(w *blocks.AttnWeights, ls *layerState, sc *attnWorker, ws *workspace, pos0 int, q2, o []float32, T, lo, hi int) {
	c := &m.cfg
	Hq, Dh := c.NumHeads, c.HeadDim
	half := c.RotaryDim / 2
	group := Hq / c.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(Dh)))
	for h := lo; h < hi; {
		g := h / group
		end := min(hi, (g+1)*group) // heads [h, end) read KV head g
		heads := end - h
		var tile []float32
		if !ls.kv.F32() {
			tile = blocks.Grow(&sc.tile, kernels.AttendScratch(heads, Dh))
		}
		batch := min(attnBatch(heads, pos0+T), T) // a decode step: 1, as before
		if ls.kv.F32() {
			batch = 1 // nothing is widened: one token at a time reads as well
		}
		// Sized for the chunk's last batch once: growing per batch would
		// allocate afresh (and touch fresh pages) for nearly every batch.
		blocks.Grow(&sc.scores, batch*heads*(pos0+T))
		for t0 := 0; t0 < T; t0 += batch {
			nb := min(batch, T-t0)
			qs := blocks.Grow(&sc.q, nb*heads*Dh)
			qi := blocks.Grow(&sc.qi, nb*heads*Dh)
			scores := blocks.Grow(&sc.scores, nb*heads*(pos0+t0+nb))
			sets := sc.sets.reset(nb)
			off := 0
			for b := range nb {
				t := t0 + b
				cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
				n := pos0 + t + 1 // causal: the cache up to and including this token
				qb := qs[b*heads*Dh : (b+1)*heads*Dh]
				for j := range heads {
					base := t*2*Hq*Dh + (h+j)*2*Dh
					q := qb[j*Dh : (j+1)*Dh]
					blocks.RMSNorm(q, q2[base:base+Dh], w.QNorm, c.RMSNormEps)
					blocks.Rotate(q, cos, sin)
				}
				sets.o[b] = o[t*Hq*Dh+h*Dh : t*Hq*Dh+end*Dh]
				sets.q[b] = qb
				sets.qi[b] = qi[b*heads*Dh : (b+1)*heads*Dh]
				sets.scores[b] = scores[off : off+heads*n]
				sets.n[b] = n
				off += heads * n
			}
			if nb == 1 {
				attendGroup(sets.o[0], sets.q[0], ls.kv, g, sets.n[0], scale, sets.scores[0], sets.qi[0], tile)
			} else {
				attendGroupMulti(sets, ls.kv, g, scale, tile)
			}
			for b := range nb {
				t := t0 + b
				for j := range heads {
					gate := q2[t*2*Hq*Dh+(h+j)*2*Dh+Dh:][:Dh]
					kernels.MulSigmoid(sets.o[b][j*Dh:(j+1)*Dh], gate)
				}
			}
		}
		h = end
	}
}

// attnBatch is how many tokens attend together for heads query heads over
// up to n cached positions: at most 8, and their scores within
// attnScoresBudget bytes.
func attnBatch(heads, n int) int {
	return max(1, min(8, attnScoresBudget/(4*heads*max(n, 1))))
}

// attnScoresBudget bounds a worker's scores scratch for a batch of tokens.
const attnScoresBudget = 2 << 20

// attnSets is a batch of tokens' slices for attendGroupMulti, reused.
type attnSets struct {
	o, q, qi, scores [][]float32
	n                []int
}

func (s *attnSets) reset(nb int) *attnSets {
	if cap(s.n) < nb {
		*s = attnSets{o: make([][]float32, nb), q: make([][]float32, nb), qi: make([][]float32, nb),
			scores: make([][]float32, nb), n: make([]int, nb)}
	}
	s.o, s.q, s.qi, s.scores, s.n = s.o[:nb], s.q[:nb], s.qi[:nb], s.scores[:nb], s.n[:nb]
	return s
}

// attendGroupMulti is attendGroup for each token of the batch (its queries,
// length, scores, qi and output in sets), bitwise what attendGroup gives it:
// the cache's tiles are widened once for the batch.
func attendGroupMulti(sets *attnSets, kv *kvCache, g int, scale float32, tile []float32) {
	kv.ScoresMulti(sets.scores, sets.q, g, sets.n, scale, sets.qi, tile)
	for b, sb := range sets.scores {
		n := sets.n[b]
		for j := range len(sb) / n {
			blocks.SoftmaxInPlace(sb[j*n : (j+1)*n])
		}
	}
	kv.ValuesMulti(sets.o, sets.scores, g, sets.n, tile)
}

// attendGroup writes softmax(q·Kᵀ·scale)·V for each query of qs [heads, Dh]
// over the first n cached tokens of KV head g into o [heads, Dh]. Per head,
// every sum runs over positions in ascending order (kernels.AttendScores,
// kernels.AttendValues and their Q8/BF16 forms); scores is scratch
// [heads, n], qi [heads, Dh], tile kernels.AttendScratch (nil for a float32
// cache).
func attendGroup(o, qs []float32, kv *kvCache, g, n int, scale float32, scores, qi, tile []float32) {
	heads := len(qs) / kv.HeadDim()
	kv.Scores(scores, qs, g, 0, n, scale, qi, tile)
	for j := range heads {
		blocks.SoftmaxInPlace(scores[j*n : (j+1)*n])
	}
	kv.Values(o, scores, g, 0, kv.HeadDim(), n, tile)
}
