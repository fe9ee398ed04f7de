package routing

// BenchRun is one bench prompt as replay figures need it: PromptTokens
// fed, then Generated tokens of which all but the last were fed back (so
// it decoded positions PromptTokens … PromptTokens+Generated−2), and the
// cache hit rate the engine measured over those decode steps.
type BenchRun struct {
	PromptTokens, Generated int
	HitRate                 float64
}

// ReplayHits is an engine's measured expert-cache hit rate over replayed
// decode steps beside a per-layer LRU of the same slots simulated on the
// same positions: every run's decode steps in the order they ran, from an
// empty cache, carried from run to run (prefill passes do not touch it).
type ReplayHits struct {
	Slots         int       `json:"slots_per_layer"`
	Steps         int       `json:"decode_steps"`
	VRAM          float64   `json:"vram_hit_rate"`          // measured, over every run's decode steps
	SimulatedLRU  float64   `json:"simulated_lru_hit_rate"` // the same steps
	VRAMRuns      []float64 `json:"vram_hit_rate_runs"`     // per run
	SimulatedRuns []float64 `json:"simulated_lru_hit_rate_runs"`
}

// ReplayHitsOf simulates a per-layer LRU of slots experts on every run's
// decode positions of src, in the runs' order, beside the runs' measured
// hit rates (weighed by their steps). A position past a trace's end is an
// error (TraceOf), not a silent wrap.
func ReplayHitsOf(src Source, geom Geometry, runs []BenchRun, slots int) (*ReplayHits, error) {
	h := &ReplayHits{Slots: slots}
	var positions, ends []int
	var measured float64
	for _, run := range runs {
		steps := max(run.Generated-1, 0)
		for p := range steps {
			positions = append(positions, run.PromptTokens+p)
		}
		ends = append(ends, len(positions))
		measured += run.HitRate * float64(steps)
		h.VRAMRuns = append(h.VRAMRuns, run.HitRate)
	}
	h.Steps = len(positions)
	if h.Steps == 0 {
		return h, nil
	}
	h.VRAM = measured / float64(h.Steps)
	t, err := TraceOf(src, geom, positions)
	if err != nil {
		return nil, err
	}
	h.SimulatedLRU = SimulateLRU(t, slots).HitRate
	from := 0
	for _, end := range ends { // each run's hits, the cache warmed by the runs before it
		upTo, err := TraceOf(src, geom, positions[:end])
		if err != nil {
			return nil, err
		}
		h.SimulatedRuns = append(h.SimulatedRuns, SimulateLRUFrom(upTo, slots, from).HitRate)
		from = end
	}
	return h, nil
}
