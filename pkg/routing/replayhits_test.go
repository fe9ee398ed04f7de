package routing

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// ReplayHitsOf simulates exactly the positions the runs decoded (a run of P
// prompt tokens and G generated decodes P … P+G−2), in order, the cache
// carried from run to run, and weighs the measured hit rates by steps.
func TestReplayHitsSimulatesTheDecodedPositions(t *testing.T) {
	geom := Geometry{Layers: 1, Experts: 8, TopK: 2}
	// Positions 0 … 4; the runs decode 2, 3, 4 and then 2, 3.
	tr, err := Parse(strings.NewReader("0 0 6 7\n1 0 6 7\n2 0 0 1\n3 0 0 1\n4 0 2 3\n"), geom)
	if err != nil {
		t.Fatal(err)
	}
	src := NewTraceSource(tr, "test", false)
	runs := []BenchRun{{PromptTokens: 2, Generated: 4, HitRate: 0.5}, {PromptTokens: 2, Generated: 3, HitRate: 1}}
	for _, tc := range []struct {
		slots    int
		sim      float64
		simRuns  []float64
		describe string
	}{
		// 2, 3, 4, 2, 3 with room for all: pos 3, 2, 3 hit.
		{8, 0.6, []float64{2.0 / 6, 1}, "every expert fits"},
		// 2 slots: pos 4 evicts {0 1}, so the second run's pos 2 misses.
		{2, 0.4, []float64{2.0 / 6, 0.5}, "2 slots"},
	} {
		h, err := ReplayHitsOf(src, geom, runs, tc.slots)
		if err != nil {
			t.Fatal(err)
		}
		if h.Steps != 5 || h.Slots != tc.slots || math.Abs(h.VRAM-0.7) > 1e-12 || !slices.Equal(h.VRAMRuns, []float64{0.5, 1}) {
			t.Errorf("%s: %+v, want 5 steps, measured 0.7 (0.5 over 3 steps, 1 over 2)", tc.describe, h)
		}
		if math.Abs(h.SimulatedLRU-tc.sim) > 1e-12 || len(h.SimulatedRuns) != 2 ||
			math.Abs(h.SimulatedRuns[0]-tc.simRuns[0]) > 1e-12 || math.Abs(h.SimulatedRuns[1]-tc.simRuns[1]) > 1e-12 {
			t.Errorf("%s: simulated %v %v, want %v %v", tc.describe, h.SimulatedLRU, h.SimulatedRuns, tc.sim, tc.simRuns)
		}
	}
	// A run past the trace's end is an error, not a silent wrap.
	if _, err := ReplayHitsOf(src, geom, []BenchRun{{PromptTokens: 4, Generated: 3}}, 2); err == nil {
		t.Errorf("positions 4 and 5 of a 5-position trace: no error")
	}
}
