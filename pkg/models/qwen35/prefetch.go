package qwen35

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// predictScratch holds prefetchNext's buffers.
type predictScratch struct {
	u, logits []float32
	ids       []int
}

// prefetchNext guesses the experts of layer next from x, the hidden state
// entering it, and hands the guesses to the expert provider to read ahead
// (ExpertPrefetcher). The guess is the next layer's router applied to x
// normed as that layer will norm its router input; the real input differs
// only by the attention output in between, so on the models measured the
// guesses mostly hold. Nothing computed here reaches the logits.
func (m *Model) prefetchNext(ws *workspace, next int, x []float32) {
	pf, ok := m.experts.(model.ExpertPrefetcher)
	if !ok || next >= len(m.layers) || m.layers[next].moe == nil {
		return
	}
	width := min(pf.PrefetchWidth(), m.cfg.NumExperts)
	if width <= 0 {
		return
	}
	c, sc, ly := &m.cfg, &ws.predict, &m.layers[next]
	u := blocks.Grow(&sc.u, c.HiddenSize)
	blocks.RMSNormRows(u, x, ly.postNorm, c.HiddenSize, c.RMSNormEps)
	logits := blocks.Grow(&sc.logits, c.NumExperts)
	blocks.MatMul(m.pool, logits, ly.moe.Router, u, 1)
	sc.ids = blocks.TopIndices(logits, width, sc.ids[:0])
	pf.Prefetch(next, sc.ids)
	ws.prof.MarkProducts(model.PhasePrefetch, ly.moe.Router)
}
