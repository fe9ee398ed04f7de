package main

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// --vram-budget is a size or auto, and only for --engine gpu: a mistake is
// a usage error before anything loads.
func TestVRAMBudgetFlag(t *testing.T) {
	m := model(t)
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--model", m, "--prompt", "hi", "--vram-budget", "4G"}, "--vram-budget 4G applies to --engine gpu"},
		{[]string{"bench", "--model", m, "--vram-budget", "4G"}, "--vram-budget 4G applies to --engine gpu"},
		{[]string{"chat", "--model", m, "--vram-budget", "4G"}, "--vram-budget 4G applies to --engine gpu"},
		{[]string{"--model", m, "--prompt", "hi", "--engine", "gpu", "--vram-budget", "lots"}, "--vram-budget: "},
		{[]string{"--model", m, "--prompt", "hi", "--engine", "gpu", "--vram-budget", "0"}, "--vram-budget 0 holds nothing"},
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
}
