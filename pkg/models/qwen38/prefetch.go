package qwen38

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// predictScratch holds prefetchNext's buffers.
type predictScratch struct {
	hc        residualScratch
	x, logits []float32
	ids       []int
}

// prefetchNext guesses the experts of layer next from R, the residual
// entering it, and hands the guesses to the expert provider to read ahead
// (model.ExpertPrefetcher): the next layer's MLP gated-residual read and
// router applied to R as it stands (the real input differs by that
// layer's mixer output). Nothing computed here reaches the logits.
func (m *Model) prefetchNext(ws *workspace, next int, R []float32) {
	pf, ok := m.moe.Experts.(model.ExpertPrefetcher)
	if !ok || next >= len(m.layers) {
		return
	}
	width := min(pf.PrefetchWidth(), m.cfg.NumExperts)
	if width <= 0 {
		return
	}
	sc, ly := &ws.predict, &m.layers[next]
	x := blocks.Grow(&sc.x, m.cfg.HiddenSize)
	m.read(&ly.mlpHC, &sc.hc, R, x, 1)
	logits := blocks.Grow(&sc.logits, m.cfg.NumExperts)
	blocks.MatMul(m.pool, logits, ly.moe.Router, x, 1)
	sc.ids = blocks.TopIndices(logits, width, sc.ids[:0])
	pf.Prefetch(next, sc.ids)
	ws.prof.MarkProducts(model.PhasePrefetch, ly.mlpHC.down, ly.mlpHC.up, ly.mlpHC.inject, ly.moe.Router)
}
