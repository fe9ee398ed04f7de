package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// --parallel is refused outside its range, on an engine without a batched
// step (the GPU before loading, qwen38 once loaded), and with
// --models-dir; each refusal says what to do.
func TestServeParallelRefusals(t *testing.T) {
	q38 := filepath.Join(t.TempDir(), "q38")
	if _, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "tiny-qwen38", Bits: 4, Output: q38, Seed: 1, Threads: 1}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve", "--model", dir, "--parallel", "17"}, "--parallel"},
		{[]string{"serve", "--model", dir, "--parallel", "0"}, "--parallel"},
		{[]string{"serve", "--model", dir, "--engine", "gpu", "--parallel", "2"}, "--parallel 2: the gpu engine decodes one sequence at a time"},
		{[]string{"serve", "--models-dir", dir, "--parallel", "2"}, "--parallel 2 applies to --model"},
		{[]string{"serve", "--model", q38, "--port", "0", "--parallel", "4"}, "engine has no batched decode step yet"},
	} {
		r := clitest.Run(t, app(), tc.args...)
		if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, tc.stderr) || strings.Contains(r.Stderr, "ready at") {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 with %q", tc.args, r.Code, r.Stderr, tc.stderr)
		}
	}
}

// A tiny qwen35 install serves with --parallel 3: it loads, starts and
// stops when asked (the ready line, on the process's stderr, says
// "parallel 3"; pkg/server's tests check what it serves).
func TestServeParallelStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r := clitest.RunWith(t, app(), clitest.Options{Ctx: ctx}, "serve", "--model", tinyInstall(t), "--port", "0", "--parallel", "3")
	if r.Code != 0 {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// parallelFits counts one sequence state (KV, its growth, the recurrent
// state) per generation in flight beside the rest of the footprint, and
// refuses, with the numbers, what the machine cannot hold.
func TestServeParallelFootprint(t *testing.T) {
	const gib = int64(1) << 30
	one := runtime.Footprint{Total: 20 * gib, KV: 2 * gib, KVGrowth: gib, Recurrent: gib, MaxContext: 262144}
	for _, tc := range []struct {
		n        int
		memTotal int64
		refused  bool
	}{
		{1, 32 * gib, false},
		{2, 32 * gib, false}, // 24 GiB ≤ 32 − 3.2
		{3, 32 * gib, false}, // 28 GiB ≤ 28.8
		{4, 32 * gib, true},  // 32 GiB
		{16, 0, false},       // memory unknown
	} {
		err := parallelFits(tc.n, one, tc.memTotal)
		if (err != nil) != tc.refused {
			t.Errorf("--parallel %d on %d GiB: %v", tc.n, tc.memTotal/gib, err)
		}
		if err != nil && !strings.Contains(err.Error(), "holds 4 sequence states of 4 GiB each (KV 2 GiB at 262144 tokens") {
			t.Errorf("--parallel %d: %v", tc.n, err)
		}
	}
}
