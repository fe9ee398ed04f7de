package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// --parallel is refused outside its range, on an engine without a batched
// step (qwen38 once loaded), and with --models-dir; each refusal says what
// to do. The GPU engine batches (its states are sized in device memory:
// TestServeDeviceParallelDefault).
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
	r := serveUntilReady(t, "--model", tinyInstall(t), "--port", "0", "--parallel", "3")
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

// Without --parallel, serve runs as many sequence states as fit beside the
// rest of the footprint, at most 4, and at least 1; the note says how many
// fit in how much.
func TestServeDefaultParallel(t *testing.T) {
	const gib, mib = int64(1) << 30, int64(1) << 20
	// One state: 1 GiB (KV 512 MiB, growth 256 MiB, recurrent 256 MiB);
	// the rest of the footprint: 2 GiB. Below 10 GiB the margin is 1 GiB.
	one := runtime.Footprint{Total: 3 * gib, KV: 512 * mib, KVGrowth: 256 * mib, Recurrent: 256 * mib, KVBits: 16, MaxContext: 65536}
	kv8 := one
	kv8.KVBits = 8
	for _, tc := range []struct {
		name     string
		f        runtime.Footprint
		memTotal int64
		want     int
		note     string
	}{
		{"roomy machine: llama-server's 4", one, 64 * gib, 4, "default: 4 states of 1 GiB fit in 55.60 GiB free"}, // 64 − 6.4 − 2
		{"room for exactly 4", one, 7 * gib, 4, "default: 4 states of 1 GiB fit in 4 GiB free"},
		{"room for 3.9", one, 7*gib - 100*mib, 3, "default: 3 states of 1 GiB fit in 3.90 GiB free; 4 need 4 GiB: lower --max-context or give --kv-bits 8 for more"},
		{"room for 2", one, 5 * gib, 2, "default: 2 states of 1 GiB fit in 2 GiB free"},
		{"room for 1", one, 4 * gib, 1, "default: 1 state of 1 GiB fits in 1 GiB free; 4 need 4 GiB"},
		{"not even 1 (the footprint check was not asked for)", one, 3 * gib, 1, "default: one state of 1 GiB, 0 B free beside the rest"},
		{"8-bit KV: no --kv-bits hint", kv8, 5 * gib, 2, "; 4 need 4 GiB: lower --max-context for more"},
		{"memory unknown", one, 0, 1, "default: this machine's memory is unknown"},
		{"empty state", runtime.Footprint{Total: gib}, 4 * gib, 4, "default: 4 states of 0 B"},
	} {
		n, note := defaultParallel(tc.f, tc.memTotal)
		if n != tc.want || !strings.Contains(note, tc.note) {
			t.Errorf("%s: %d, %q; want %d with %q", tc.name, n, note, tc.want, tc.note)
		}
		if tc.memTotal > 0 && n > 1 {
			if err := parallelFits(n, tc.f, tc.memTotal); err != nil {
				t.Errorf("%s: the default %d is refused when given: %v", tc.name, n, err)
			}
			if err := parallelFits(n+1, tc.f, tc.memTotal); err == nil && n < defaultParallelMost {
				t.Errorf("%s: %d more than the default fits", tc.name, n+1)
			}
		}
	}
}

// On a machine whose memory holds 2.5 sequence states beside the rest of
// the footprint, serve without --parallel runs 2 and says why; an explicit
// --parallel 3 is refused with the numbers and what to do; --force starts it.
func TestServeParallelMemory(t *testing.T) {
	dir := tinyInstall(t)
	in, err := runtime.OpenInstall(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := runtime.ComputeFootprint(in, runtime.FootprintOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	per := f.SequenceState()
	mem := int64(1)<<30 + f.Total - per + per*5/2 // 1 GiB: the margin below 10 GiB
	old := machineMemory
	machineMemory = func() (int64, error) { return mem, nil }
	defer func() { machineMemory = old }()

	r := serveUntilReady(t, "--model", dir, "--port", "0", "--threads", "1")
	want := "parallel 2 (default: 2 states of " + expertcache.FormatSize(per) + " fit in "
	if r.Code != 0 || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "+ 2 sequence states × (KV") {
		t.Errorf("default: exit %d, stderr %q; want %q and the footprint of 2 states", r.Code, r.Stderr, want)
	}

	r = clitest.Run(t, app(), "serve", "--model", dir, "--port", "0", "--threads", "1", "--parallel", "3")
	for _, want := range []string{"--parallel 3 holds 3 sequence states of " + expertcache.FormatSize(per) + " each", "; 2 fit in the ", "Lower --parallel or --max-context", "or pass --force"} {
		if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, want) || strings.Contains(r.Stderr, "ready at") {
			t.Errorf("--parallel 3: exit %d, stderr %q; want exit 2 with %q", r.Code, r.Stderr, want)
		}
	}

	r = serveUntilReady(t, "--model", dir, "--port", "0", "--threads", "1", "--parallel", "3", "--force")
	if r.Code != 0 || !strings.Contains(r.Stderr, "| parallel 3\n") {
		t.Errorf("--parallel 3 --force: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// fakeRoom is a device engine's state room: per bytes a state, room free.
type fakeRoom struct{ per, room int64 }

func (f fakeRoom) SequenceRoom() (int64, int64, error) { return f.per, f.room, nil }

// Without a batched step the device default is one generation at a time;
// with one, it counts states against the device's room (room for 4: 4).
func TestServeDeviceParallelDefaultOne(t *testing.T) {
	const gib = int64(1) << 30
	room := fakeRoom{gib, 10 * gib}
	if n, note := deviceParallelDefault("gpu", false, room); n != 1 || !strings.Contains(note, "no batched step") {
		t.Errorf("no batched step: %d (%q), want 1", n, note)
	}
	if n, _ := deviceParallelDefault("gpu", true, room); n != 4 {
		t.Errorf("room for 4: %d, want 4", n)
	}
}

// The GPU's default counts sequence states against the device's free
// memory: up to 4, at least 1, the note saying how many fit and what to
// lower for more.
func TestServeDeviceParallelDefault(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		per, room int64
		n         int
		note      string
	}{
		{gib, 10 * gib, 4, "default: 4 states of 1 GiB fit in 10 GiB of device memory free"},
		{gib, 3*gib + 1, 3, "3 states of 1 GiB fit in 3.00 GiB of device memory free; 4 need 4 GiB: lower --max-context or --vram-budget for more"},
		{gib, gib, 1, "default: 1 state of 1 GiB fits in 1 GiB of device memory free; 4 need"},
		{gib, gib / 2, 1, "default: one device state of 1 GiB, 512 MiB of device memory free beside the rest"},
	} {
		n, note := deviceStatesIn(tc.per, tc.room)
		if n != tc.n || !strings.Contains(note, tc.note) {
			t.Errorf("per %d room %d: %d (%q), want %d (%q)", tc.per, tc.room, n, note, tc.n, tc.note)
		}
	}
}
