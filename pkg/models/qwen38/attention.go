package qwen38

import (
	"math"
	"slices"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// attnState is an attention layer's share of a sequence: K (after k_norm
// and RoPE) and V [pos, Hkv·Dh] in the state's KV width, the indexer's raw
// keys [pos, dih] and the block keys of every complete block [⌊pos/cr⌋,
// dih]. The indexer's keys stay float32 whatever the KV width: they are
// its own projection, not K, so the blocks it selects (and its tie-break)
// do not depend on the width.
type attnState struct {
	kv       *blocks.KVCache
	kraw, kb []float32
}

// newAttnState allocates capacity tokens of an attention layer's state.
func newAttnState(c Config, bits, capacity int) attnState {
	return attnState{kv: blocks.NewKVCache(bits, capacity, c.NumKVHeads, c.HeadDim),
		kraw: make([]float32, 0, capacity*c.IndexerDim), kb: make([]float32, 0, capacity/c.IndexerBlock*c.IndexerDim)}
}

// resized is a copy of capacity tokens holding the first used (a GDN
// layer's empty attnState stays empty).
func (as *attnState) resized(c *Config, capacity, used int) attnState {
	if as.kv == nil {
		return attnState{}
	}
	return attnState{kv: as.kv.Resized(capacity, used),
		kraw: append(make([]float32, 0, capacity*c.IndexerDim), as.kraw...),
		kb:   append(make([]float32, 0, capacity/c.IndexerBlock*c.IndexerDim), as.kb...)}
}

// attnScratch holds the per-chunk buffers of an attention layer.
type attnScratch struct {
	q2   []float32 // q_proj output [T, Hq·2·Dh]: per head, query then gate
	k, v []float32 // [T, Hkv·Dh]
	kRow []float32 // one token's keys before a below-float32 cache rounds them
	qk   []float32 // index_qk_proj output [T, (nih+1)·dih]
	o    []float32 // gated attention output [T, Hq·Dh]
	// selection of each token: sparse[t] false means every visible key;
	// else the kept blocks sel[t·B : (t+1)·B], ascending, plus the tail.
	sparse  []bool
	sel     []int
	iq      []float32 // one token's indexer queries [nih, dih]
	scores  []float32 // block scores [nb]
	order   []int     // block indices sorted by score
	workers []attnWorker
}

type attnWorker struct {
	q, qi  []float32 // a head group's normed, rotated queries and their interleaved copy [heads, Dh]
	scores []float32 // [heads, n]
	tile   []float32 // kernels.AttendScratch below float32
	// a sparse query's selected keys and values of one KV head, in the
	// cache's width (one head, rows of Dh)
	selected *blocks.KVCache
}

// attnMixer is §3.6 for T tokens at positions pos0…: it appends the chunk's
// keys, values and raw indexer keys to the state and completes block keys,
// picks each token's keys with the indexer, then lets every query head
// attend over its token's selection.
func (m *Model) attnMixer(w *attnWeights, as *attnState, sc *attnScratch, ws *workspace, pos0 int, x, out []float32, T int) {
	c := &m.cfg
	Hq, Hkv, Dh, dih := c.NumHeads, c.NumKVHeads, c.HeadDim, c.IndexerDim
	kvd, qkw, half := c.kvDim(), (c.IndexerHeads+1)*dih, c.RotaryDim/2
	q2, k, v := blocks.Grow(&sc.q2, T*2*Hq*Dh), blocks.Grow(&sc.k, T*kvd), blocks.Grow(&sc.v, T*kvd)
	qk := blocks.Grow(&sc.qk, T*qkw)
	blocks.MatMulMulti(m.pool, [][]float32{q2, k, v, qk}, []*kernels.Matrix{w.Q, w.K, w.V, w.index}, x, T)
	ws.prof.MarkProducts(model.PhaseAttnProjections, w.Q, w.K, w.V, w.index)

	// Keys are stored after k_norm and RoPE, values as projected, each
	// rounded once to the cache's width; a float32 cache takes the keys in
	// place.
	as.kraw = as.kraw[:pos0*dih]
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		dst := as.kv.KeyRowF32(pos0 + t)
		if dst == nil {
			dst = blocks.Grow(&sc.kRow, kvd)
		}
		for g := range Hkv {
			kh := dst[g*Dh : (g+1)*Dh]
			blocks.RMSNorm(kh, k[t*kvd+g*Dh:t*kvd+(g+1)*Dh], w.KNorm, c.RMSNormEps)
			blocks.Rotate(kh, cos, sin)
		}
		if as.kv.F32() {
			copy(as.kv.ValueRowF32(pos0+t), v[t*kvd:(t+1)*kvd])
		} else {
			as.kv.PutKV(pos0+t, dst, v[t*kvd:(t+1)*kvd])
		}
		as.kraw = append(as.kraw, qk[t*qkw+c.IndexerHeads*dih:(t+1)*qkw]...)
	}
	m.completeBlocks(w, as, pos0+T)
	m.selectKeys(w, as, sc, ws, pos0, qk, T)

	o := blocks.Grow(&sc.o, T*Hq*Dh)
	sc.workers = blocks.WorkerSlots(sc.workers, m.pool.Threads())
	m.pool.Parallel(Hq, func(worker, lo, hi int) {
		m.attnHeads(w, as, sc, &sc.workers[worker], ws, pos0, q2, o, T, lo, hi)
	})
	// what the last query reads: its attended K and V rows in the cache's
	// width and, past the dense window, every block key
	n, read := pos0+T, 0
	if sc.sparse[T-1] {
		n, read = selectedCount(c.IndexerBlocks(), c.IndexerBlock, n), len(as.kb)
	}
	ws.prof.Mark(model.PhaseAttnHeads, int64(n)*blocks.KVBytesPerToken(as.kv.Bits(), kvd, Dh)+4*int64(read))
	blocks.MatMul(m.pool, out, w.O, o, T)
	ws.prof.MarkProducts(model.PhaseAttnOut, w.O)
}

// completeBlocks computes the block key of every block complete at n
// tokens that has none yet: RoPE at the block's first position of
// RMSNorm(mean of its cr raw keys). It depends on nothing but those keys.
func (m *Model) completeBlocks(w *attnWeights, as *attnState, n int) {
	c := &m.cfg
	cr, dih, half := c.IndexerBlock, c.IndexerDim, c.RotaryDim/2
	var cosSin [2][]float32
	for b := len(as.kb) / dih; (b+1)*cr <= n; b++ {
		mean := make([]float32, dih)
		for tau := b * cr; tau < (b+1)*cr; tau++ {
			blocks.AddTo(mean, as.kraw[tau*dih:(tau+1)*dih])
		}
		for i := range mean {
			mean[i] /= float32(cr)
		}
		blocks.RMSNorm(mean, mean, w.ikNorm, c.RMSNormEps)
		cosSin[0], cosSin[1] = make([]float32, half), make([]float32, half)
		m.rope.Tables(b*cr, cosSin[0], cosSin[1])
		blocks.Rotate(mean, cosSin[0], cosSin[1])
		as.kb = append(as.kb, mean...)
	}
}

// selectKeys runs the indexer for every token of the chunk. A query at
// position p sees nb = ⌊(p+1)/cr⌋ complete blocks; while nb ≤ B it keeps
// all of them (dense), else the B best by Σ_h relu(q_h·kb_b)/√dih, the
// lower block first among equal scores, and always the incomplete tail.
func (m *Model) selectKeys(w *attnWeights, as *attnState, sc *attnScratch, ws *workspace, pos0 int, qk []float32, T int) {
	c := &m.cfg
	cr, dih, nih, B, half := c.IndexerBlock, c.IndexerDim, c.IndexerHeads, c.IndexerBlocks(), c.RotaryDim/2
	qkw := (nih + 1) * dih
	if cap(sc.sparse) < T {
		sc.sparse = make([]bool, T)
	}
	if cap(sc.sel) < T*B {
		sc.sel = make([]int, T*B)
	}
	sc.sparse, sc.sel = sc.sparse[:T], sc.sel[:T*B]
	scale := float32(math.Sqrt(float64(dih)))
	for t := range T {
		nb := (pos0 + t + 1) / cr
		sc.sparse[t] = nb > B
		if !sc.sparse[t] {
			continue
		}
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		iq := blocks.Grow(&sc.iq, nih*dih)
		for h := range nih {
			qh := iq[h*dih : (h+1)*dih]
			blocks.RMSNorm(qh, qk[t*qkw+h*dih:t*qkw+(h+1)*dih], w.iqNorm, c.RMSNormEps)
			blocks.Rotate(qh, cos, sin)
		}
		scores := blocks.Grow(&sc.scores, nb)
		m.pool.Parallel(nb, func(_, lo, hi int) { // each score is its own sum: any split gives the same
			for b := lo; b < hi; b++ {
				kb := as.kb[b*dih : (b+1)*dih]
				var s float32
				for h := range nih {
					s += max(0, dot(iq[h*dih:(h+1)*dih], kb))
				}
				scores[b] = s / scale
			}
		})
		sel := topBlocks(scores, B, sc.order[:0])
		sc.order = sel
		copy(sc.sel[t*B:(t+1)*B], sel[:B])
		slices.Sort(sc.sel[t*B : (t+1)*B])
	}
}

// topBlocks returns the indices of the n best scores, in no particular
// order, appended to buf: the first n in the order (−score, index), found
// with a heap of n whose root is the worst kept.
func topBlocks(scores []float32, n int, buf []int) []int {
	worse := func(a, b int) bool { // a ranks after b
		return scores[a] < scores[b] || (scores[a] == scores[b] && a > b)
	}
	h := buf[:0]
	for b := range scores {
		if len(h) < n {
			h = append(h, b)
			for i := len(h) - 1; i > 0 && worse(h[i], h[(i-1)/2]); i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
			continue
		}
		if !worse(h[0], b) {
			continue
		}
		h[0] = b
		for i := 0; ; {
			w, l, r := i, 2*i+1, 2*i+2
			if l < n && worse(h[l], h[w]) {
				w = l
			}
			if r < n && worse(h[r], h[w]) {
				w = r
			}
			if w == i {
				break
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
	return h
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// attnHeads computes the gated attention output of query heads [lo, hi)
// for the chunk's T tokens. Heads sharing a KV head score together; every
// head's own arithmetic is the same whatever the grouping. Scores are
// computed for every visible key while the query is in the dense window;
// past it, only for the selected keys, gathered in ascending position order.
func (m *Model) attnHeads(w *attnWeights, as *attnState, sc *attnScratch, wk *attnWorker, ws *workspace, pos0 int, q2, o []float32, T, lo, hi int) {
	c := &m.cfg
	Hq, Dh, half := c.NumHeads, c.HeadDim, c.RotaryDim/2
	group := Hq / c.NumKVHeads
	B, cr := c.IndexerBlocks(), c.IndexerBlock
	scale := float32(1 / math.Sqrt(float64(Dh)))
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		n := pos0 + t + 1
		for h := lo; h < hi; {
			g := h / group
			end := min(hi, (g+1)*group)
			heads := end - h
			qs := blocks.Grow(&wk.q, heads*Dh)
			for j := range heads {
				base := t*2*Hq*Dh + (h+j)*2*Dh
				q := qs[j*Dh : (j+1)*Dh]
				blocks.RMSNorm(q, q2[base:base+Dh], w.QNorm, c.RMSNormEps)
				blocks.Rotate(q, cos, sin)
			}
			og := o[t*Hq*Dh+h*Dh : t*Hq*Dh+end*Dh]
			kv, kg, nk := as.kv, g, n
			if sc.sparse[t] {
				// Only the selection is attended: its keys and values are
				// gathered, in ascending position order and in the cache's
				// width, into a one-head cache.
				sel := sc.sel[t*B : (t+1)*B]
				kv, kg, nk = gatherSelected(wk, as, g, sel, cr, n), 0, selectedCount(len(sel), cr, n)
			}
			tile := kv.TileScratch(&wk.tile, heads)
			scores := blocks.Grow(&wk.scores, heads*nk)
			kv.Scores(scores, qs, kg, 0, nk, scale, blocks.Grow(&wk.qi, heads*Dh), tile)
			for j := range heads {
				blocks.SoftmaxInPlace(scores[j*nk : (j+1)*nk])
			}
			kv.Values(og, scores, kg, 0, Dh, nk, tile)
			for j := range heads {
				gate := q2[t*2*Hq*Dh+(h+j)*2*Dh+Dh:][:Dh]
				kernels.MulSigmoid(og[j*Dh:(j+1)*Dh], gate)
			}
			h = end
		}
	}
}

// selectedCount is how many keys a query at position n−1 attends when it
// keeps the blocks sel: theirs and the tail's, cr·⌊n/cr⌋ to n−1.
func selectedCount(sel, cr, n int) int { return sel*cr + n - n/cr*cr }

// gatherSelected copies KV head g's keys and values at the selected
// positions — the tokens of the blocks sel (ascending) and the tail from
// cr·⌊n/cr⌋ to n−1 — into the worker's one-head cache, runs of adjacent
// blocks at once, and returns it.
func gatherSelected(wk *attnWorker, as *attnState, g int, sel []int, cr, n int) *blocks.KVCache {
	tail := n / cr * cr
	count := selectedCount(len(sel), cr, n)
	dst := wk.selected
	if dst == nil || dst.Bits() != as.kv.Bits() || dst.HeadDim() != as.kv.HeadDim() || dst.Capacity() < count {
		dst = blocks.NewKVCache(as.kv.Bits(), (len(sel)+1)*cr, 1, as.kv.HeadDim()) // the most a query keeps
		wk.selected = dst
	}
	at := 0
	for i := 0; i < len(sel); {
		j := i + 1
		for j < len(sel) && sel[j] == sel[j-1]+1 {
			j++
		}
		p0, p1 := sel[i]*cr, (sel[j-1]+1)*cr
		as.kv.CopyHeadRows(dst, g, at, p0, p1)
		at += p1 - p0
		i = j
	}
	as.kv.CopyHeadRows(dst, g, at, tail, n)
	return dst
}
