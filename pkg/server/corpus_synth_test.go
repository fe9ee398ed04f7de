package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
	nvmairuntime "github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
)

// synthCorpusSubset are the schemas the synthetic install answers: the
// quick run's shapes less the longest (sequential thinking's nine
// properties cost the most tokens on a 248k-vocabulary model on 2 cores).
var synthCorpusSubset = []string{
	"anthropic-go-structured-outputs-raw",
	"openai-node-math-response",
	"openai-python-query-tool#Query",
	"mcp-server-filesystem#edit_file",
}

// synthInstall is a 4-layer synthetic Qwen3.5-35B-A3B at 4 bits (what
// `nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4`
// writes, 2.8 GB), built once into the temp directory and reused by later
// runs (NVMAI_SYNTH_CORPUS_DIR names another place).
func synthInstall(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("NVMAI_SYNTH_CORPUS_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "nvmai-test-qwen3.5-35b-a3b-4bit-4layers")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
		return dir
	}
	if _, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "qwen3.5-35b-a3b", Bits: 4, Layers: 4, Output: dir, Seed: 1, Threads: 2}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The acceptance on a synthetic install (NVMAI_LONG_TESTS=1 only: the
// install is 2.8 GB): the full 248k vocabulary and the real geometry's
// random weights at temperature 1, synthCorpusSubset with 20 seeds rotated
// over the three protocols, every reply validated.
func TestCorpusThroughTheServerSynthetic(t *testing.T) {
	if os.Getenv("NVMAI_LONG_TESTS") == "" {
		t.Skip("NVMAI_LONG_TESTS=1 runs it (a 2.8 GB synthetic install)")
	}
	e, err := nvmairuntime.Load(synthInstall(t), nvmairuntime.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	re := server.NewRuntimeEngine(e, server.RuntimeOptions{ModelID: "synth", PrefillChunk: 16})
	runCorpus(t, re, loadCorpus(t), synthCorpusSubset, 20, true)
}
