package server

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/runtime"
)

// The runtime engine reports its expert cache per layer (summing to the
// totals /metrics shows) and its footprint as the CLI computes it.
func TestRuntimeEngineReportsLayersAndMemory(t *testing.T) {
	e := tinyEngine(t)
	r := NewRuntimeEngine(e, RuntimeOptions{})
	collect(t, r, e.Tokenizer.Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), 4)
	st, layers, ok := r.ExpertCacheStatsByLayer()
	total, ok2 := r.ExpertCacheStats()
	if !ok || !ok2 || st != total {
		t.Fatalf("by layer %+v (%v), totals %+v (%v)", st, ok, total, ok2)
	}
	if len(layers) != len(e.Install.Manifest.Experts.Layers) {
		t.Fatalf("%d layers reported, the install has %d", len(layers), len(e.Install.Manifest.Experts.Layers))
	}
	var hits, misses int64
	for _, l := range layers {
		hits, misses = hits+l.Hits, misses+l.Misses
	}
	if hits != st.Hits || misses != st.Misses || hits+misses == 0 {
		t.Fatalf("layers sum to %d/%d, totals %d/%d", hits, misses, st.Hits, st.Misses)
	}
	m, ok := r.Memory()
	want, err := runtime.ComputeFootprint(e.Install, runtime.FootprintOptions{Experts: runtime.ExpertOptions{Slots: e.ExpertStats().SlotsPerLayer}, Threads: 1})
	if !ok || err != nil || m.Resident != want.Resident || m.ExpertSlots != want.ExpertSlots || m.KV != want.KV || m.Resident <= 0 || m.ExpertSlots <= 0 || m.KV <= 0 {
		t.Fatalf("memory %+v (%v), footprint %+v (%v)", m, ok, want, err)
	}
}
