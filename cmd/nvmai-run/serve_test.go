package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// serve --models-dir: flags that name one model, or that need several,
// are usage errors before any port is opened.
func TestServeModelsFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"serve", "--model", dir, "--models-dir", dir}, "give --model or --models-dir, not both"},
		{[]string{"serve", "--model", dir, "--idle-unload", "10m"}, "--idle-unload needs --models-dir"},
		{[]string{"serve", "--models-dir", dir, "--model-id", "x"}, "--model-id names one model's id or template"},
		{[]string{"serve", "--models-dir", dir, "--chat-template", "t.jinja"}, "--chat-template names one model's id or template"},
		{[]string{"serve", "--models-dir", dir, "--rope-scaling", "yarn"}, "--rope-scaling applies to one model"},
		{[]string{"serve", "--models-dir", dir, "--idle-unload", "-1s"}, "--idle-unload -1s: give a positive duration"},
	} {
		r := clitest.Run(t, app(), tc.args...)
		if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, tc.stderr) || r.Stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 with %q", tc.args, r.Code, r.Stdout, r.Stderr, tc.stderr)
		}
	}
	r := clitest.Run(t, app(), "serve", "--models-dir", dir, "--port", "0")
	if r.Code == 0 || !strings.Contains(r.Stderr, "holds no verified nvmai install (0 found)") {
		t.Errorf("an empty --models-dir: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// serve --engine gpu is no longer refused: without a GPU the load fails
// naming the driver (exit 1), with one the server starts and stops when
// the context ends (the GPU test in pkg/server checks what it serves).
func TestServeEngineGPUIsServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r := clitest.RunWith(t, app(), clitest.Options{Ctx: ctx}, "serve", "--engine", "gpu", "--model", tinyInstall(t), "--port", "0")
	if r.Code == cliutil.ExitUsage || strings.Contains(r.Stderr, "serve runs on --engine cpu") {
		t.Fatalf("exit %d, stderr %q: serve refused --engine gpu", r.Code, r.Stderr)
	}
	if r.Code != 0 && !strings.Contains(r.Stderr, "--engine gpu: ") {
		t.Errorf("exit %d, stderr %q: want the server to start, or the GPU load's error", r.Code, r.Stderr)
	}
}
