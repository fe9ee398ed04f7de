package expertcache

// Speculative reads. In decode the model predicts the next layer's experts
// (that layer's router applied to the hidden state as the current layer
// leaves it) and calls Prefetch; the reads then run while the next layer's
// attention computes, instead of after its routing. How often the guesses
// are asked for is Stats.PrefetchHits / Stats.Prefetched (nvmai-run bench
// prints it).
//
// A speculative read claims the policy's victim slot and pins it while the
// disk writes into it; readers take demand reads first and skip a
// speculative one whose visit has already passed. A visit that asks for an
// expert still being read speculatively waits for that read like a miss; if
// it failed or was skipped, the visit reads it again on demand, so a bad
// guess or a bad read costs time, never a wrong or missing expert.

// DefaultPrefetch is the number of experts per layer predicted and read
// ahead when Options.Prefetch is 0.
const DefaultPrefetch = 4

// prefetchWidth resolves Options.Prefetch: nothing is read ahead when every
// expert has a slot (it will soon be resident anyway) or when the slots
// barely hold one token's experts (a guess would evict what the token needs).
// It returns the width and the most speculative reads in flight.
func prefetchWidth(want, slots, experts, topK int) (width, inFlight int) {
	if want == 0 {
		want = DefaultPrefetch
	}
	if want < 0 || slots >= experts || slots < 2*topK {
		return 0, 0
	}
	width = min(want, topK)
	return width, 2 * width
}

// PrefetchWidth is how many predicted experts per layer Prefetch reads;
// 0 means the model need not predict (moe.ExpertPrefetcher).
func (c *Cache) PrefetchWidth() int { return c.prefetch }

// Prefetch starts reading the first PrefetchWidth experts of ids for
// layer's next visit, skipping any resident or already being read, and
// returns at once. It never blocks on I/O, reports no error (a failed
// guess is read again when asked for) and does nothing while another call
// uses the cache. ids are best first; invalid ones are ignored.
func (c *Cache) Prefetch(layer int, ids []int) {
	if c.prefetch == 0 || layer < 0 || layer >= len(c.layers) || !c.busy.CompareAndSwap(false, true) {
		return
	}
	defer c.leave()
	if c.closed {
		return
	}
	c.reapSpec()
	lc := c.layers[layer]
	visit := c.visits.Load() + 1
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range ids[:min(len(ids), c.prefetch)] {
		if c.specOut >= c.specMax || lc.res.free() <= c.topK {
			return
		}
		if e < 0 || e >= c.experts || lc.res.where[e] >= 0 {
			continue
		}
		s := lc.res.claim(e)
		lc.spec[s], lc.prefetched[s], lc.warmed[s] = true, true, false
		c.specOut++
		c.stats.Prefetched++
		rq := c.readOf(lc, s, e)
		rq.spec, rq.visit = true, visit
		c.spec <- rq // never blocks: the queue holds specMax
	}
}

// awaitSpec marks the slots of the batch that a speculative read is still
// filling as awaited (c.loading), and returns how many there are.
func (c *Cache) awaitSpec(lc *layerCache, slotOf []int) int {
	n := 0
	for i, s := range slotOf {
		if lc.spec[s] && c.loading[s] < 0 {
			c.loading[s] = i
			n++
		}
	}
	return n
}

// awaitBatch waits for the next read the current batch of lc waits for,
// accounting for any other speculative read that lands meanwhile. An
// awaited speculative read that failed or was skipped is issued again as a
// demand read, whose outcome is the one returned.
func (c *Cache) awaitBatch(lc *layerCache, ids []int) (readDone, error) {
	for {
		d := c.await()
		if !d.spec {
			return d, c.landed(lc, d, ids)
		}
		if !c.specLanded(lc, d) {
			continue
		}
		if d.canceled || d.err != nil {
			c.readAgain(lc, d, ids[c.loading[d.slot]])
			continue
		}
		return d, nil
	}
}

// specLanded accounts for a finished speculative read and reports whether
// the current batch of lc (nil between visits) waits for its slot. A read
// that failed or was skipped empties its slot unless the batch waits for
// it (then awaitBatch reads it again).
func (c *Cache) specLanded(lc *layerCache, d readDone) (awaited bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sl := c.layers[d.layer]
	sl.spec[d.slot] = false
	sl.res.unpin(d.slot)
	c.specOut--
	awaited = sl == lc && c.loading[d.slot] >= 0
	switch {
	case d.canceled && d.warm:
		c.stats.WarmSkipped++
	case d.canceled:
		c.stats.PrefetchSkipped++
	case d.err == nil && d.warm:
		c.stats.BytesRead += c.stride
		c.stats.WarmBytes += c.stride
		return awaited
	case d.err == nil:
		c.stats.BytesRead += c.stride
		c.stats.PrefetchBytes += c.stride
		return awaited
	}
	if !awaited {
		sl.res.forget(d.slot)
		sl.prefetched[d.slot], sl.warmed[d.slot] = false, false
	}
	return awaited
}

// readAgain issues, as a demand read, the awaited speculative read d of
// expert e that failed or was skipped; it was counted as a hit on a guess,
// and is a miss after all.
func (c *Cache) readAgain(lc *layerCache, d readDone, e int) {
	c.mu.Lock()
	c.stats.Hits, c.stats.Misses = c.stats.Hits-1, c.stats.Misses+1
	if d.warm {
		c.stats.WarmHits--
	} else {
		c.stats.PrefetchHits--
	}
	c.mu.Unlock()
	c.reqs <- c.readOf(lc, d.slot, e)
}

// reapSpec accounts for the speculative reads that have landed, without
// waiting. Between visits the done queue holds only speculative reads.
func (c *Cache) reapSpec() {
	for c.specOut > 0 {
		select {
		case d := <-c.done:
			c.specLanded(nil, d)
		default:
			return
		}
	}
}

// drainSpec waits for every speculative read in flight (Acquire, which
// does not handle them, and Close).
func (c *Cache) drainSpec() {
	for c.specOut > 0 {
		c.specLanded(nil, c.await())
	}
}
