package qwen35

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// Long-context decode: one KV head's group of query heads at a time, its
// scores split across the pool's threads by positions and its values by
// columns, so every thread reads its own share of the cache (splitting by
// heads would have every thread of a group read all of it). The split
// changes no result: each score is its own dot product, softmax stays per
// head, and each output column is still the one chain over the positions in
// ascending order (TestSplitAttentionBitwise).

// splitAttentionMin is the cached length from which a decode step splits
// attention that way, when the pool has more threads than KV heads (with
// fewer, one KV head per thread already reads each row once).
var splitAttentionMin = 4096

// splitAttentionAlways makes every decode step split (the tests' switch).
var splitAttentionAlways = false

// splitChunk is the positions one scoring job takes: whole kernel tiles.
const splitChunk = 1024

func (m *Model) splitAttention(n, T int) bool {
	if T != 1 || m.pool.Threads() < 2 {
		return false
	}
	return splitAttentionAlways || (n >= splitAttentionMin && m.pool.Threads() > m.cfg.NumKVHeads)
}

// attnSplit is attnHeads for one token at pos0 with the work split as
// above; q2 holds its queries and gates, o receives the gated output.
func (m *Model) attnSplit(w *blocks.AttnWeights, ls *layerState, sc *attnScratch, ws *workspace, pos0 int, q2, o []float32) {
	c := &m.cfg
	Hq, Dh := c.NumHeads, c.HeadDim
	half := c.RotaryDim / 2
	group := Hq / c.NumKVHeads
	scale := float32(1 / math.Sqrt(float64(Dh)))
	n := pos0 + 1
	qs := blocks.Grow(&sc.qAll, Hq*Dh)
	for h := range Hq {
		q := qs[h*Dh : (h+1)*Dh]
		blocks.RMSNorm(q, q2[h*2*Dh:h*2*Dh+Dh], w.QNorm, c.RMSNormEps)
		blocks.Rotate(q, ws.cos[:half], ws.sin[:half])
	}
	scores := blocks.Grow(&sc.scoresAll, group*n)
	chunks := (n + splitChunk - 1) / splitChunk
	cb := ls.kv.ColumnBlock()
	for g := range c.NumKVHeads {
		qg := qs[g*group*Dh : (g+1)*group*Dh]
		m.parallelHeads(chunks, func(worker, lo, hi int) {
			wk := &sc.workers[worker]
			for ch := lo; ch < hi; ch++ {
				a, b := ch*splitChunk, min(n, (ch+1)*splitChunk)
				part := blocks.Grow(&wk.scores, group*(b-a))
				ls.kv.Scores(part, qg, g, a, b-a, scale, blocks.Grow(&wk.qi, group*Dh), wk.tileFor(ls.kv, group, Dh))
				for j := range group {
					copy(scores[j*n+a:j*n+b], part[j*(b-a):(j+1)*(b-a)])
				}
			}
		})
		m.parallelHeads(group, func(_, lo, hi int) {
			for j := lo; j < hi; j++ {
				blocks.SoftmaxInPlace(scores[j*n : (j+1)*n])
			}
		})
		m.parallelHeads(Dh/cb, func(worker, lo, hi int) {
			wk := &sc.workers[worker]
			for blk := lo; blk < hi; blk++ {
				part := blocks.Grow(&wk.q, group*cb)
				ls.kv.Values(part, scores, g, blk*cb, cb, n, wk.tileFor(ls.kv, group, Dh))
				for j := range group {
					copy(o[(g*group+j)*Dh+blk*cb:][:cb], part[j*cb:(j+1)*cb])
				}
			}
		})
	}
	for h := range Hq {
		kernels.MulSigmoid(o[h*Dh:(h+1)*Dh], q2[h*2*Dh+Dh:][:Dh])
	}
}

// tileFor is the worker's kernels.AttendScratch for a cache below float32.
func (wk *attnWorker) tileFor(kv *kvCache, heads, dh int) []float32 {
	return kv.TileScratch(&wk.tile, heads)
}
