package expertcache

// Stats are a cache's counters since New.
type Stats struct {
	Hits, Misses int64 // experts served from a slot / read from disk
	BytesRead    int64 // bytes read into slots, speculative reads included
	// Speculative reads (Prefetch): issued; asked for while or after they
	// were read (counted in Hits too); skipped because their visit passed;
	// bytes read (in BytesRead too).
	Prefetched, PrefetchHits, PrefetchSkipped, PrefetchBytes int64
	// Warm reads (warm.go), counted like Prefetch's and apart from them:
	// issued; asked for (in Hits too); skipped; bytes read (in BytesRead
	// too). WarmBytes − WarmHits × stride is what the guesses wasted (or
	// hold, not asked for yet).
	Warmed, WarmHits, WarmSkipped, WarmBytes int64
	ReadSeconds                              float64 // wall time with at least one read of a request in flight
	WaitSeconds                              float64 // time callers spent blocked waiting for reads
	Mode                                     string  // resolved read mode: dontcache, direct, dropbehind or buffered
	Policy                                   string  // eviction policy
	SlotsPerLayer                            int
	IOThreads                                int
	PrefetchWidth                            int   // experts per layer read ahead on a guess; 0: off
	Warm                                     bool  // warm reads on (Options.NoWarm unset)
	BudgetBytes                              int64 // memory held by slots: slots × stride × layers
}

// HitRate is Hits / (Hits + Misses), or 0 before any request.
func (s Stats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// ReadRate is the demand reads' throughput in bytes per second while they
// were in flight, or 0 before any read.
func (s Stats) ReadRate() float64 {
	if s.ReadSeconds <= 0 {
		return 0
	}
	return float64(s.BytesRead-s.PrefetchBytes-s.WarmBytes) / s.ReadSeconds
}

// Stats returns a snapshot of the counters; it may be called from any
// goroutine.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// LayerStats are one layer's share of Stats' Hits and Misses.
type LayerStats struct {
	Hits, Misses int64
}

// StatsByLayer returns Stats and, in the same instant, each layer's hits
// and misses (indexed as the install's expert layers), whose sums are
// Stats' Hits and Misses: a live view can show where the cache misses
// (serve's /v1/live heat strip) and agree with the totals it shows beside.
// It may be called from any goroutine.
func (c *Cache) StatsByLayer() (Stats, []LayerStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	layers := make([]LayerStats, len(c.layers))
	for i, lc := range c.layers {
		layers[i] = LayerStats{Hits: lc.hits, Misses: lc.misses}
	}
	return c.stats, layers
}
