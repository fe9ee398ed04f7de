package expertcache

import "math"

// Warm reads: the next layer's experts read during this layer's tail and
// the next layer's mixer and router.
//
// In a long prefill pass a layer's visit wants nearly every expert (a pass
// of T tokens misses an expert with probability about e^(−T·k/E)), yet
// without warm reads the disk idles from the moment a layer's last read
// lands until the next layer's visit starts: through the rest of that
// layer's expert compute, and the whole of the next layer's mixer (Gated
// DeltaNet or attention) and router. So when a visit has asked for at least
// warmMinShare of a layer's experts, the cache, as soon as the visit has
// issued its last read, queues speculative reads of the next layer's
// experts that are not resident, into that layer's empty slots. Readers
// serve them only when no demand read waits, so they use the disk the
// visit leaves idle; the next visit awaits a guess still in flight like a
// miss (rolling.go, visitBatch), and a guess it does not ask for stays
// resident until the policy evicts it.
//
// Only empty slots are used, never evicting an expert: in a long pass every
// resident expert is wanted too, so moving one read earlier by evicting a
// resident would cost exactly one more read, which on a disk-bound pass
// gains nothing. Empty slots exist while a layer has not been visited since
// the cache was made (the first long pass of a cold cache: there, up to
// slots reads per layer move into the mixer's time) or after a failed read.
// A wrong guess costs only its bytes (Stats.WarmBytes − WarmHits × stride);
// what Visit hands over is the same with or without warm reads.

// warmMinShare is the share of a layer's experts a visit must ask for
// before the cache reads the next layer's experts on a guess: with 3/4
// asked for (a pass of ~1.4·E/k tokens) at most about a quarter of the
// guesses go unused.
const warmMinShare = 0.75

// warmAfter queues warm reads of the layer after lc when this visit, of n
// experts, was wide enough (see warmMinShare). It is called once per visit,
// from within it (c.busy held), after the visit's last demand read of lc
// was issued.
func (c *Cache) warmAfter(lc *layerCache, n int) {
	if !c.warm || float64(n) < warmMinShare*float64(c.experts) || lc.index+1 >= len(c.layers) {
		return
	}
	c.warmLayer(c.layers[lc.index+1])
}

// BeginPass is told, before a pass's first layer runs, that the pass
// carries tokens tokens (moe.PassWarmer). When the pass is long enough that
// the first layer's visit should ask for at least warmMinShare of its
// experts (1 − e^(−tokens·k/E) of them, routing being random-like), the
// first layer's missing experts are read into its empty slots on a guess,
// while the embeddings and the first mixer run. It returns at once and does
// nothing while another call uses the cache.
func (c *Cache) BeginPass(tokens int) {
	if !c.warm || tokens < 2 || !c.busy.CompareAndSwap(false, true) {
		return
	}
	defer c.leave()
	if c.closed {
		return
	}
	c.reapSpec()
	if 1-math.Exp(-float64(tokens)*float64(c.topK)/float64(c.experts)) < warmMinShare {
		return
	}
	c.warmLayer(c.layers[0])
}

// warmLayer queues warm reads of next's missing experts into its empty
// slots, for the next visit (which must be next's), leaving more than top_k
// slots unpinned.
func (c *Cache) warmLayer(next *layerCache) {
	visit := c.visits.Load() + 1
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := 0; e < c.experts; e++ {
		if c.specOut >= c.specMax+c.warmMax || next.res.free() <= c.topK || !next.res.hasEmpty() {
			return
		}
		if next.res.where[e] >= 0 {
			continue
		}
		s := next.res.claim(e) // an empty slot: victim prefers them
		next.spec[s], next.warmed[s], next.prefetched[s] = true, true, false
		c.specOut++
		c.stats.Warmed++
		rq := c.readOf(next, s, e)
		rq.spec, rq.warm, rq.visit = true, true, visit
		c.spec <- rq // never blocks: the queue holds specMax + warmMax
	}
}

// hasEmpty reports whether some unpinned slot holds no expert.
func (r *residency) hasEmpty() bool {
	for i := range r.slots {
		if r.slots[i].expert < 0 && r.slots[i].pins == 0 {
			return true
		}
	}
	return false
}
