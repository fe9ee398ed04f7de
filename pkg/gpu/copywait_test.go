package gpu

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
)

// A streamed bench's copy wait and replay hits reach the text summary and
// the JSON under the names scripts/gpu-check.sh reads; a resident one's
// report has neither.
func TestBenchSummaryStreamedFigures(t *testing.T) {
	info := &BenchInfo{Device: "NVIDIA H100", GraphMsPerToken: 9.5,
		CopyWait:   &CopyWait{Routing: "synthetic agent seed=1", Steps: 64, Prompt: 512, StreamedMs: 5.2, NoCopyMs: 3.9, WaitMs: 1.3},
		ReplayHits: &routing.ReplayHits{Slots: 24, Steps: 381, VRAM: 0.915, SimulatedLRU: 0.9, VRAMRuns: []float64{0.915}, SimulatedRuns: []float64{0.9}}}
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

// The copy wait's measurement (the router's routing, and a replayed one)
// leaves nothing a user sees: the counters as they were, and the engine's
// logits, greedy and sampled tokens afterwards bitwise the resident
// engine's, though the steps without copies left stale bytes in the slots
// (the tables are emptied). Its figures are sane: both steps positive,
// the wait their difference.
func TestCopyWaitLeavesTheEngineAsItWas(t *testing.T) {
	needGPU(t)
	t.Setenv("NVMAI_GPU_CHUNK", "128")
	ids := loadRefs(t, "tiny-moe.refs.json")[0].IDs
	dir := install(t, "tiny-moe-fused", 4)
	res := loadGPUWith(t, dir, 0, 0)
	want := runOutputs(t, res, ids)
	res.Close()
	e := loadGPUWith(t, dir, 8, 0)
	defer e.Close()
	b := e.Model().(*Backend)
	runOutputs(t, e, ids) // warm slots, and counters to keep
	before, _, err := b.Model.StreamStats()
	if err != nil {
		t.Fatal(err)
	}
	geom, err := e.RoutingGeometry()
	if err != nil {
		t.Fatal(err)
	}
	src, err := routing.NewSynthetic(geom, routing.Spec{Regime: "uniform", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    model.RouteOverride
		desc string
	}{{nil, "router"}, {src, src.Describe()}} {
		cw, err := b.MeasureCopyWait(tc.o, tc.desc, 16, 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("COPYWAIT tiny-moe 4-bit, 8 slots, %s: %.3f ms a step waits (%.3f as it runs, %.3f copies skipped)", tc.desc, cw.WaitMs, cw.StreamedMs, cw.NoCopyMs)
		if cw.StreamedMs <= 0 || cw.NoCopyMs <= 0 || cw.WaitMs != cw.StreamedMs-cw.NoCopyMs || cw.Routing != tc.desc {
			t.Errorf("%s: %+v", tc.desc, cw)
		}
	}
	after, _, err := b.Model.StreamStats()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the counters moved: %+v, then %+v", before, after)
	}
	got := runOutputs(t, e, ids)
	if !slices.Equal(got.logits, want.logits) || !slices.Equal(got.greedy, want.greedy) || !slices.EqualFunc(got.sampled, want.sampled, slices.Equal) {
		t.Errorf("after the copy wait the engine's outputs differ from the resident engine's")
	}
}
