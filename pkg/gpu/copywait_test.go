package gpu

import (
	"encoding/json"
	"strings"
	"testing"
)

// A streamed bench's copy wait and replay hits reach the text summary and
// the JSON under the names scripts/gpu-check.sh reads; a resident one's
// report has neither.
func TestBenchSummaryStreamedFigures(t *testing.T) {
	info := &BenchInfo{Device: "NVIDIA H100", GraphMsPerToken: 9.5,
		CopyWait:   &CopyWait{Routing: "synthetic agent seed=1", Steps: 64, Prompt: 512, StreamedMs: 5.2, NoCopyMs: 3.9, WaitMs: 1.3},
		ReplayHits: &ReplayHits{Slots: 24, Steps: 381, VRAM: 0.915, SimulatedLRU: 0.9, VRAMRuns: []float64{0.915}, SimulatedRuns: []float64{0.9}}}
	got := strings.Join(info.Summary(), "\n")
	for _, want := range []string{
		"gpu copy wait (synthetic agent seed=1 routing, 64 decode steps after 512 prompt tokens): 1.300 ms a step waits for its copies: 5.200 ms as it runs, 3.900 ms with the copies skipped",
		"VRAM hit rate 91.5% measured, 90.0% for a simulated per-layer LRU of 24 slots on the same 381 decode steps (+1.5 points)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	js, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"copy_wait_ms_per_token":1.3`, `"no_copy_step_ms":3.9`, `"simulated_lru_hit_rate":0.9`, `"vram_hit_rate":0.915`, `"simulated_lru_hit_rate_runs":[0.9]`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("JSON lacks %s: %s", key, js)
		}
	}
	resident, _ := json.Marshal(&BenchInfo{Device: "NVIDIA H100"})
	if s := string(resident); strings.Contains(s, "copy_wait") || strings.Contains(s, "replay_hits") {
		t.Errorf("a resident report carries streamed figures: %s", s)
	}
}
