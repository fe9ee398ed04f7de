package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/routing"
)

func TestRouteTraceGenAndSim(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.trace")
	r := clitest.Run(t, app(), "route-trace", "gen", "--geometry", "qwen3.5-35b-a3b", "--layers", "4", "--regime", "agent", "--tokens", "64", "--seed", "3", "-o", path)
	if r.Code != 0 || r.Stdout != "" || !strings.Contains(r.Stderr, "wrote "+path+": 64 positions of 4 layers, 256 experts, top-8, synthetic agent seed=3") {
		t.Fatalf("gen: exit %d stdout %q stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := routing.Generate(routing.Geometry{Layers: 4, Experts: 256, TopK: 8}, routing.Agent, 64, 3)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	want.WriteTo(&buf)
	if !bytes.Equal(got, buf.Bytes()) {
		t.Fatal("the file differs from routing.Generate's trace")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%d entries in the output directory, want only the trace", len(entries))
	}
	// Stdout, with an explicit geometry: the same bytes.
	r = clitest.Run(t, app(), "route-trace", "gen", "--experts", "256", "--top-k", "8", "--layers", "4", "--regime", "agent", "--tokens", "64", "--seed", "3")
	if r.Code != 0 || r.Stdout != string(got) {
		t.Fatalf("gen to stdout: exit %d, %d bytes, want the file's %d", r.Code, len(r.Stdout), len(got))
	}
	r = clitest.Run(t, app(), "route-trace", "sim", "--trace", path, "-g", "qwen3.5-35b-a3b", "--layers", "4", "--slots", "8,102,256")
	if r.Code != 0 || !strings.Contains(r.Stdout, "trace "+path+" sha256 ") || strings.Count(r.Stdout, "\n") != 5 {
		t.Fatalf("sim: exit %d stdout %q", r.Code, r.Stdout)
	}
	last := strings.Split(strings.TrimSpace(r.Stdout), "\n")[4]
	hits := hitColumn.FindAllStringSubmatch(last, -1)
	if !strings.HasPrefix(last, "256 ") || len(hits) != 3 || hits[0][1] != hits[1][1] || hits[1][1] != hits[2][1] {
		t.Fatalf("all experts resident: the cache, LRU and Belady should agree: %q", last)
	}
	// Budgets, turned into slots as nvmai-run --ram-budget does: 8 GiB over 40 layers buys 121
	// slots at 4 bits, 64 at 8 (docs/streaming.md), so 820 MiB over these 4 layers buys the same;
	// the cache never hits less than LRU less 0.1 point.
	for _, tc := range []struct{ bits, slots string }{{"4", "820M=121"}, {"8", "820M=64"}} {
		r = clitest.Run(t, app(), "route-trace", "sim", "--trace", path, "-g", "qwen3.5-35b-a3b", "--layers", "4", "--bits", tc.bits, "--ram-budget", "820M")
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.Code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[2], tc.slots+" ") {
			t.Fatalf("sim --bits %s --ram-budget 820M: exit %d stdout %q stderr %q", tc.bits, r.Code, r.Stdout, r.Stderr)
		}
		hits := hitColumn.FindAllStringSubmatch(lines[2], -1)
		cache, _ := strconv.ParseFloat(hits[0][1], 64)
		lru, _ := strconv.ParseFloat(hits[1][1], 64)
		if len(hits) != 3 || cache < lru-0.1 {
			t.Fatalf("cache below LRU: %q", lines[2])
		}
	}
}

// TestRouteTraceSimFrom: --from counts hits after a warm-up, and is bounded by the trace.
func TestRouteTraceSimFrom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.trace")
	if r := clitest.Run(t, app(), "route-trace", "gen", "-g", "qwen3.5-35b-a3b", "--layers", "2", "--regime", "agent", "--tokens", "40", "-o", path); r.Code != 0 {
		t.Fatalf("gen: exit %d %s", r.Code, r.Stderr)
	}
	r := clitest.Run(t, app(), "route-trace", "sim", "--trace", path, "-g", "qwen3.5-35b-a3b", "--layers", "2", "--slots", "64", "--from", "10")
	if r.Code != 0 || !strings.Contains(r.Stdout, "hits counted from position 10 on (30 positions); the first 10 only warm the caches") {
		t.Fatalf("sim --from 10: exit %d stdout %q", r.Code, r.Stdout)
	}
	clitest.UsageError(t, app(), "--from 40: the trace has 40 positions", "route-trace", "sim", "--trace", path, "-g", "qwen3.5-35b-a3b", "--layers", "2", "--slots", "64", "--from", "40")
}

// hitColumn matches one "hit% (min–max%)" column of route-trace sim.
var hitColumn = regexp.MustCompile(`(\d+\.\d)% \(\s*\d+\.\d–`)

func TestRouteTraceGenWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	r := clitest.Run(t, app(), "route-trace", "gen", "--experts", "8", "--top-k", "2", "--layers", "1", "--regime", "diverse", "--tokens", "4", "-o", filepath.Join(ro, "x.trace"))
	if r.Code != 1 || !strings.Contains(r.Stderr, "route-trace gen") {
		t.Fatalf("exit %d stderr %q", r.Code, r.Stderr)
	}
	if entries, _ := os.ReadDir(ro); len(entries) != 0 {
		t.Fatalf("%d entries left behind", len(entries))
	}
}

func TestRouteTraceUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.trace")
	if err := os.WriteFile(bad, []byte("0 0 1 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := []string{"route-trace", "gen"}
	sim := []string{"route-trace", "sim", "--trace", bad}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{append(gen, "--regime", "agent", "--tokens", "4"), "give --geometry NAME, or --experts N, --top-k K and --layers L"},
		{append(gen, "-g", "nope", "--regime", "agent", "--tokens", "4"), `--geometry "nope" is not known; choose one of`},
		{append(gen, "-g", "qwen3.5-9b", "--regime", "agent", "--tokens", "4"), "--geometry qwen3.5-9b has no experts"},
		{append(gen, "-g", "qwen3-30b-a3b", "--experts", "8", "--regime", "agent", "--tokens", "4"), "give --geometry or --experts and --top-k, not both"},
		{append(gen, "--experts", "8", "--top-k", "9", "--layers", "2", "--regime", "agent", "--tokens", "4"), "top-k 9 is out of range 1 to 8"},
		{append(gen, "-g", "qwen3-30b-a3b", "--tokens", "4"), "--regime is required"},
		{append(gen, "-g", "qwen3-30b-a3b", "--regime", "chatty", "--tokens", "4"), `--regime: routing regime "chatty" is not known`},
		{append(gen, "-g", "qwen3-30b-a3b", "--regime", "agent"), "--tokens N is required"},
		{append(gen, "-g", "qwen3-30b-a3b", "--regime", "agent", "--tokens", "0"), "--tokens 0 is out of range"},
		{[]string{"route-trace", "sim", "-g", "qwen3-30b-a3b", "--slots", "51"}, "--trace FILE is required"},
		{append(sim, "-g", "qwen3-30b-a3b"), "--slots N or --ram-budget SIZE is required"},
		{append(sim, "-g", "qwen3-30b-a3b", "--slots", "51", "--ram-budget", "8G", "--bits", "4"), "give --slots or --ram-budget, not both"},
		{append(sim, "-g", "qwen3.5-35b-a3b", "--ram-budget", "8G"), "--ram-budget needs --bits 4 or 8"},
		{append(sim, "-g", "qwen3-30b-a3b", "--ram-budget", "8G", "--bits", "4"), "--ram-budget needs a --geometry that nvmai-convert synth builds"},
		{append(sim, "--experts", "8", "--top-k", "2", "--layers", "1", "--ram-budget", "8G", "--bits", "4"), "--ram-budget needs a --geometry that nvmai-convert synth builds"},
		{append(sim, "-g", "qwen3.5-35b-a3b", "--ram-budget", "100M", "--bits", "4"), "--ram-budget 100M is below this geometry's minimum of"},
		{append(sim, "-g", "qwen3.5-35b-a3b", "--ram-budget", "lots", "--bits", "4"), "--ram-budget: "},
		{append(sim, "-g", "qwen3-30b-a3b", "--slots", "51", "--bits", "4"), "--bits goes with --ram-budget"},
		{append(sim, "-g", "qwen3-30b-a3b", "--slots", "7"), "--slots 7 is out of range: use 8 (top-k) to 128 (experts)"},
		{[]string{"route-trace", "sim", "--trace", filepath.Join(dir, "missing"), "-g", "qwen3-30b-a3b", "--slots", "51"}, "--trace: routing trace: open"},
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
	r := clitest.Run(t, app(), append(sim, "-g", "qwen3-30b-a3b", "--slots", "51")...)
	if r.Code != 1 || !strings.Contains(r.Stderr, bad+": routing trace line 1: 4 fields, want 10") {
		t.Fatalf("malformed trace: exit %d stderr %q", r.Code, r.Stderr)
	}
}
