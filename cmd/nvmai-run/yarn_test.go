package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/convert"
)

// A model whose config.json sets YaRN runs with it without a flag;
// --rope-scaling yarn on top is a usage error, not a second scaling.
func TestYaRNConfigRefusesTheFlag(t *testing.T) {
	root := t.TempDir()
	snap := filepath.Join(root, "snap")
	testfix.CopyTree(t, testfix.Embedded(t), snap)
	p := filepath.Join(snap, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	rp := cfg["text_config"].(map[string]any)["rope_parameters"].(map[string]any)
	rp["rope_type"], rp["factor"], rp["original_max_position_embeddings"] = "yarn", 4.0, 1024
	raw, _ = json.Marshal(cfg)
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "m")
	if _, err := convert.Run(context.Background(), convert.Options{Input: snap, Targets: []convert.Target{{Bits: 8, Dir: dir}}}); err != nil {
		t.Fatal(err)
	}
	if r := clitest.Run(t, app(), "--model", dir, "--prompt", "Once upon a", "-n", "2"); r.Code != 0 {
		t.Errorf("without flags: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r := clitest.Run(t, app(), "--model", dir, "--prompt", "Once upon a", "--rope-scaling", "yarn")
	if r.Code != cliutil.ExitUsage || !strings.Contains(r.Stderr, "already sets yarn RoPE scaling (factor 4 over 1024 positions)") {
		t.Errorf("--rope-scaling yarn: exit %d, stderr %q", r.Code, r.Stderr)
	}
}
