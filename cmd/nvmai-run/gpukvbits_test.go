package main

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// --engine gpu takes --kv-bits 8, 16 and 32 as the CPU engine does (it used
// to refuse all but 32): without a GPU the load fails naming the driver
// (exit 1), never a usage error; a width neither engine has is still one.
func TestGPUEngineTakesKVBits(t *testing.T) {
	m := model(t)
	for _, bits := range []string{"8", "16", "32"} {
		r := clitest.Run(t, app(), "--model", m, "--prompt", "hi", "--max-tokens", "1", "--engine", "gpu", "--kv-bits", bits)
		if r.Code == cliutil.ExitUsage || strings.Contains(r.Stderr, "keeps its KV cache in float32") {
			t.Errorf("--engine gpu --kv-bits %s: exit %d, stderr %q: refused", bits, r.Code, r.Stderr)
		}
		if r.Code != 0 && !strings.Contains(r.Stderr, "--engine gpu: ") {
			t.Errorf("--engine gpu --kv-bits %s: exit %d, stderr %q: want a run, or the GPU load's error", bits, r.Code, r.Stderr)
		}
	}
	clitest.UsageError(t, app(), "--kv-bits 4: use 8, 16 or 32", "--model", m, "--prompt", "hi", "--engine", "gpu", "--kv-bits", "4")
}
