package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
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
