package qwen35

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
	pf, ok := m.experts.(ExpertPrefetcher)
	if !ok || next >= len(m.layers) || m.layers[next].moe == nil {
		return
	}
	width := min(pf.PrefetchWidth(), m.cfg.NumExperts)
	if width <= 0 {
		return
	}
	c, sc, ly := &m.cfg, &ws.predict, &m.layers[next]
	u := grow(&sc.u, c.HiddenSize)
	rmsNormRows(u, x, ly.postNorm, c.HiddenSize, c.RMSNormEps)
	logits := grow(&sc.logits, c.NumExperts)
	m.matmul(logits, ly.moe.router, u, 1)
	sc.ids = topIndices(logits, width, sc.ids[:0])
	pf.Prefetch(next, sc.ids)
	ws.prof.markProducts(PhasePrefetch, ly.moe.router)
}

// topIndices appends the indices of the n largest scores to dst, best
// first, the lower index first among equals.
func topIndices(scores []float32, n int, dst []int) []int {
	for i, v := range scores {
		if len(dst) == n && v <= scores[dst[n-1]] {
			continue
		}
		if len(dst) < n {
			dst = append(dst, i)
		}
		j := len(dst) - 1
		for ; j > 0 && v > scores[dst[j-1]]; j-- {
			dst[j] = dst[j-1]
		}
		dst[j] = i
	}
	return dst
}
