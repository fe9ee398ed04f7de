package qwen38

import (
	"math"
	"slices"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// attnState is an attention layer's share of a sequence: K (after k_norm
// and RoPE) and V [pos, Hkv·Dh], the indexer's raw keys [pos, dih] and the
// block keys of every complete block [⌊pos/cr⌋, dih].
type attnState struct {
	k, v, kraw, kb []float32
}

// attnScratch holds the per-chunk buffers of an attention layer.
type attnScratch struct {
	q2   []float32 // q_proj output [T, Hq·2·Dh]: per head, query then gate
	k, v []float32 // [T, Hkv·Dh]
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
	keys   []float32 // a sparse query's selected keys of one KV head [selected, Dh]
	values []float32 // and their values
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

	as.k = slices.Grow(as.k, T*kvd)[:(pos0+T)*kvd]
	as.v = append(as.v[:pos0*kvd], v[:T*kvd]...)
	as.kraw = as.kraw[:pos0*dih]
	for t := range T {
		cos, sin := ws.cos[t*half:(t+1)*half], ws.sin[t*half:(t+1)*half]
		dst := as.k[(pos0+t)*kvd : (pos0+t+1)*kvd]
		for g := range Hkv {
			kh := dst[g*Dh : (g+1)*Dh]
			blocks.RMSNorm(kh, k[t*kvd+g*Dh:t*kvd+(g+1)*Dh], w.KNorm, c.RMSNormEps)
			blocks.Rotate(kh, cos, sin)
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
	ws.prof.Mark(model.PhaseAttnHeads, int64(4*(len(as.k)+len(as.v)+len(as.kraw))))
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
	Hq, Dh, kvd, half := c.NumHeads, c.HeadDim, c.kvDim(), c.RotaryDim/2
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
			keys, values, stride, nk := as.k[g*Dh:], as.v[g*Dh:], kvd, n
			if sc.sparse[t] {
				// Only the selection is attended: its keys and values are
				// gathered, in ascending position order, into rows of Dh.
				keys, values, nk = gatherSelected(wk, as, g, Dh, kvd, sc.sel[t*B:(t+1)*B], cr, n)
				stride = Dh
			}
			scores := blocks.Grow(&wk.scores, heads*nk)
			kernels.AttendScores(scores, qs, Dh, keys, stride, nk, scale, blocks.Grow(&wk.qi, heads*Dh))
			for j := range heads {
				blocks.SoftmaxInPlace(scores[j*nk : (j+1)*nk])
			}
			kernels.AttendValues(og, scores, Dh, values, stride, nk)
			for j := range heads {
				gate := q2[t*2*Hq*Dh+(h+j)*2*Dh+Dh:][:Dh]
				kernels.MulSigmoid(og[j*Dh:(j+1)*Dh], gate)
			}
			h = end
		}
	}
}

// gatherSelected copies KV head g's keys and values at the selected
// positions — the tokens of the blocks sel (ascending) and the tail from
// cr·⌊n/cr⌋ to n−1 — into the worker's rows of Dh, and returns them with
// their count.
func gatherSelected(wk *attnWorker, as *attnState, g, Dh, kvd int, sel []int, cr, n int) (keys, values []float32, count int) {
	tail := n / cr * cr
	count = len(sel)*cr + n - tail
	keys, values = blocks.Grow(&wk.keys, count*Dh), blocks.Grow(&wk.values, count*Dh)
	i := 0
	take := func(p int) {
		copy(keys[i*Dh:(i+1)*Dh], as.k[p*kvd+g*Dh:p*kvd+(g+1)*Dh])
		copy(values[i*Dh:(i+1)*Dh], as.v[p*kvd+g*Dh:p*kvd+(g+1)*Dh])
		i++
	}
	for _, b := range sel {
		for p := b * cr; p < (b+1)*cr; p++ {
			take(p)
		}
	}
	for p := tail; p < n; p++ {
		take(p)
	}
	return keys, values, count
}
