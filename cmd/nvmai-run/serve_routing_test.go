package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

func init() {
	// serve_routing.go's flags, applied by serveRouting.
	serveApplied["routing"] = ""
	serveApplied["routing-trace"] = ""
}

// serve --routing and --routing-trace are refused where they cannot
// apply, each refusal saying why, before anything listens.
func TestServeRoutingRefusals(t *testing.T) {
	dir := tinyInstall(t)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--routing", "synthetic:chatty"}, "--routing: "},
		{[]string{"--routing", "synthetic:agent", "--routing-trace", "x"}, "--routing-trace"},
		{[]string{"--routing-trace", filepath.Join(t.TempDir(), "missing.txt")}, "missing.txt"},
	} {
		args := append([]string{"serve", "--model", dir, "--port", "0"}, tc.args...)
		r := clitest.Run(t, app(), args...)
		if r.Code == 0 || !strings.Contains(r.Stderr, tc.stderr) || strings.Contains(r.Stderr, "ready at") {
			t.Errorf("%q: exit %d, stderr %q; want a refusal with %q", args, r.Code, r.Stderr, tc.stderr)
		}
	}
	r := clitest.Run(t, app(), "serve", "--models-dir", t.TempDir(), "--port", "0", "--routing", "synthetic:agent")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "--routing and --routing-trace apply to --model") {
		t.Errorf("--models-dir: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// serve --parallel 2 --routing synthetic:agent:seed=5 starts, saying what
// each slot replays and that read-ahead is off; so does a trace.
func TestServeRoutingStarts(t *testing.T) {
	dir := tinyInstall(t)
	trace := filepath.Join(t.TempDir(), "trace.txt")
	var b strings.Builder
	for pos := range 4 {
		for l := range 8 {
			b.WriteString(string(rune('0'+pos)) + " " + string(rune('0'+l)) + " 0 1 2 3\n")
		}
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		line  string
	}{
		{[]string{"--routing", "synthetic:agent:seed=5"}, "routing replayed from synthetic agent seed=5, slot i drawing seed 5+i; read-ahead off"},
		{[]string{"--routing-trace", trace, "--prefetch", "2"}, "(4 positions), slot i from position i × 2, repeating at its end; read-ahead 2"},
	} {
		args := append([]string{"--model", dir, "--port", "0", "--parallel", "2"}, tc.flags...)
		r := serveUntilReady(t, args...)
		if r.Code != 0 || !strings.Contains(r.Stderr, tc.line) || !strings.Contains(r.Stderr, "| parallel 2") {
			t.Errorf("%q: exit %d, stderr %q; want %q", args, r.Code, r.Stderr, tc.line)
		}
	}
}
