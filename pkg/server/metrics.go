package server

import "context"

// ExpertCacheStats are an engine's expert-cache counters since it loaded.
type ExpertCacheStats struct {
	Hits, Misses int64 // experts found in a slot / read from disk
	BytesRead    int64 // bytes read into slots, read-ahead included
	// PCIe: the slots are the GPU's, filled from pinned host RAM, and
	// BytesRead are the bytes copied over PCIe (nothing is read from disk).
	PCIe bool
}

// ExpertCacheReporter is an Engine that streams its experts through a
// cache and can report it (RuntimeEngine). ok is false when this engine
// has no expert cache (a dense model, or the GPU engine, which holds
// every expert): its counters are then not reported at all rather than
// reported as zeros that look like an idle cache.
type ExpertCacheReporter interface {
	ExpertCacheStats() (stats ExpertCacheStats, ok bool)
}

// Activity is what the server is doing at one moment, for /metrics.
type Activity struct {
	Waiting    int // requests queued for their turn
	Generating int // generations running
	// Expert is the loaded engine's expert cache (HasExpert false: the
	// engine has none, or no model is loaded).
	Expert    ExpertCacheStats
	HasExpert bool
	// ExpertLayers are Expert's hits and misses per layer, taken with it
	// (nil when the engine does not report them).
	ExpertLayers []ExpertLayerStats
}

// Activity reports the queue, the generations running and the loaded
// engine's expert cache. It may be called from any goroutine.
func (s *Server) Activity() Activity {
	a := Activity{Waiting: s.q.waiting(), Generating: int(s.generating.Load())}
	// Under the read lock: with --models-dir the engine is unloaded only
	// after it is taken out under the write lock.
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r, ok := s.engine.(ExpertLayerReporter); ok {
		a.Expert, a.ExpertLayers, a.HasExpert = r.ExpertCacheStatsByLayer()
	} else if r, ok := s.engine.(ExpertCacheReporter); ok {
		a.Expert, a.HasExpert = r.ExpertCacheStats()
	}
	return a
}

// generate runs the job's generation, counted in Activity's Generating
// while it runs.
func (j *Job) generate(ctx context.Context, g Generation, onToken func(string) bool) (Outcome, error) {
	j.s.generating.Add(1)
	defer j.s.generating.Add(-1)
	onToken, end := j.liveBegin(g, onToken)
	out, err := j.e.Generate(ctx, g, onToken)
	end(out)
	return out, err
}

// ExpertCacheStats implements ExpertCacheReporter.
func (r *RuntimeEngine) ExpertCacheStats() (ExpertCacheStats, bool) {
	st := r.e.ExpertStats()
	if st.Mode == "" { // zero Stats: the engine has no expert cache
		return ExpertCacheStats{}, false
	}
	return expertCacheStats(st), true
}
