package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// TestBenchRoutingFlags: bench --json with --routing names the synthetic
// source and carries the per-layer figures in every run and the median;
// the text report prints the source and their table.
func TestBenchRoutingFlags(t *testing.T) {
	m := model(t)
	r := clitest.Run(t, app(), "bench", "--model", m, "--tokens", "3", "--prompt-tokens", "6", "--skip-bandwidth", "--quiet",
		"--routing", "synthetic:agent:seed=3", "--json")
	if r.Code != 0 {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep["routing"] != "synthetic agent seed=3" {
		t.Errorf("routing %v", rep["routing"])
	}
	if rep["prefetch"] != 0.0 {
		t.Errorf("prefetch %v under replayed routing without --prefetch, want 0 (read-ahead off)", rep["prefetch"])
	}
	runs := append(rep["runs"].([]any), rep["median"])
	for _, run := range runs {
		for _, k := range []string{"hit_rate", "hit_rate_layer_min", "hit_rate_layer_max", "new_experts_per_layer_token", "bytes_read_per_token", "waits_per_token", "io_wait_s_per_token"} {
			if _, ok := run.(map[string]any)[k]; !ok {
				t.Errorf("run %v lacks %q", run.(map[string]any)["prompt"], k)
			}
		}
	}

	trace := filepath.Join(t.TempDir(), "short.txt")
	// Position 0 of every layer (8 layers, 4 experts each): far too short
	// for a run, so it must wrap.
	var b strings.Builder
	for l := range 8 {
		b.WriteString("0 " + string(rune('0'+l)) + " 0 1 2 3\n")
	}
	os.WriteFile(trace, []byte(b.String()), 0o644)
	r = clitest.Run(t, app(), "bench", "--model", m, "--tokens", "3", "--prompt-tokens", "6", "--skip-bandwidth", "--quiet",
		"--routing-trace", trace, "--routing-trace-wrap")
	if r.Code != 0 {
		t.Fatalf("wrapped trace: exit %d: %s", r.Code, r.Stderr)
	}
	for _, want := range []string{"routing: trace " + trace + " sha256 ", "(wrapped: the trace repeated to cover a prompt)", "read-ahead: off", "layer hit min", "new/layer/tok", "waits/tok"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.Stdout)
		}
	}
	// Read-ahead asked for explicitly stays on, with a note on where its guesses come from.
	r = clitest.Run(t, app(), "bench", "--model", m, "--tokens", "3", "--prompt-tokens", "6", "--skip-bandwidth", "--quiet",
		"--routing-trace", trace, "--routing-trace-wrap", "--expert-cache-slots", "10", "--prefetch", "2")
	if r.Code != 0 || !strings.Contains(r.Stdout, "note: the read-ahead guesses (--prefetch 2) still come from the model's router") {
		t.Errorf("--prefetch 2 under replay: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	r = clitest.Run(t, app(), "bench", "--model", m, "--tokens", "3", "--prompt-tokens", "6", "--skip-bandwidth", "--quiet", "--routing-trace", trace)
	if r.Code != 1 || !strings.Contains(r.Stderr, "has 1 positions and the run needs position 1") {
		t.Errorf("short trace without --routing-trace-wrap: exit %d, %q", r.Code, r.Stderr)
	}
}

// TestBenchRoutingOnTheGPU: --engine gpu takes --routing and
// --routing-trace (the GPU engine replays routing): no usage refusal; on
// a machine with a GPU the report names the source, elsewhere the engine
// fails to load for want of a GPU.
func TestBenchRoutingOnTheGPU(t *testing.T) {
	m := model(t)
	trace := filepath.Join(t.TempDir(), "trace.txt")
	var b strings.Builder
	for l := range 8 { // position 0 of the fixture's 8 layers, repeated (--routing-trace-wrap)
		b.WriteString("0 " + strconv.Itoa(l) + " 0 1 2 3\n")
	}
	os.WriteFile(trace, []byte(b.String()), 0o644)
	for _, tc := range []struct{ flag, value, source string }{
		{"--routing", "synthetic:agent", "synthetic agent seed=1"},
		{"--routing-trace", trace, "trace"},
	} {
		r := clitest.Run(t, app(), "bench", "--model", m, "--engine", "gpu", "--tokens", "3", "--prompt-tokens", "6",
			"--skip-bandwidth", "--quiet", "--json", "--routing-trace-wrap="+strconv.FormatBool(tc.flag == "--routing-trace"), tc.flag, tc.value)
		if r.Code == cliutil.ExitUsage || strings.Contains(r.Stderr, "needs an engine") || strings.Contains(r.Stderr, "need an engine") {
			t.Errorf("%s on the GPU engine refused: exit %d, %s", tc.flag, r.Code, r.Stderr)
			continue
		}
		if r.Code != 0 {
			t.Logf("%s on the GPU engine: exit %d (no GPU here?): %s", tc.flag, r.Code, strings.TrimSpace(r.Stderr))
			continue
		}
		var rep map[string]any
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if got, _ := rep["routing"].(string); !strings.Contains(got, tc.source) {
			t.Errorf("%s on the GPU engine: routing %q, want it to name %q", tc.flag, got, tc.source)
		}
	}
}

// TestBenchRoutingErrors: routing flags that clash and a bad spec are
// usage errors before the model loads; a malformed trace line is an error
// naming the file and line.
func TestBenchRoutingErrors(t *testing.T) {
	m := model(t)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"bench", "--model", m, "--routing-trace-wrap"}, "--routing-trace-wrap repeats a --routing-trace file; give one"},
		{[]string{"bench", "--model", m, "--routing-trace", "x", "--routing", "synthetic:agent"}, "give --routing-trace or --routing, not both"},
		{[]string{"bench", "--model", m, "--routing", "synthetic:bursty"}, `--routing: routing "synthetic:bursty": routing regime "bursty" is not known`},
		{[]string{"bench", "--model", m, "--routing", "synthetic:agent:seed=x"}, `is not seed=N`},
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	os.WriteFile(bad, []byte("0 0 0 1 2 3\n0 1 0 1 2 99\n"), 0o644)
	r := clitest.Run(t, app(), "bench", "--model", m, "--tokens", "2", "--skip-bandwidth", "--quiet", "--routing-trace", bad)
	if r.Code != 1 || !strings.Contains(r.Stderr, bad+": routing trace line 2: expert id 3 \"99\" is not an integer from 0 to 15") {
		t.Errorf("malformed trace: exit %d, %q", r.Code, r.Stderr)
	}
}

// replayHits simulates exactly the positions the runs decoded (a run of P
// prompt tokens and G generated decodes P … P+G−2), in order, the cache
// carried from run to run, and weighs the measured hit rates by steps.
func TestReplayHitsSimulatesTheDecodedPositions(t *testing.T) {
	geom := routing.Geometry{Layers: 1, Experts: 8, TopK: 2}
	// Positions 0 … 4; the runs decode 2, 3, 4 and then 2, 3.
	tr, err := routing.Parse(strings.NewReader("0 0 6 7\n1 0 6 7\n2 0 0 1\n3 0 0 1\n4 0 2 3\n"), geom)
	if err != nil {
		t.Fatal(err)
	}
	src := routing.NewTraceSource(tr, "test", false)
	runs := []runtime.BenchRun{{PromptTokens: 2, Generated: 4, HitRate: 0.5}, {PromptTokens: 2, Generated: 3, HitRate: 1}}
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
		h, err := replayHits(src, geom, runs, tc.slots)
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
	if _, err := replayHits(src, geom, []runtime.BenchRun{{PromptTokens: 4, Generated: 3}}, 2); err == nil {
		t.Errorf("positions 4 and 5 of a 5-position trace: no error")
	}
}
