package qwen38gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

// fixture is a dev fixture: from $NVMAI_GPU_FIXTURES (the copy that
// travels to GPU machines, scripts/gpu-check.sh), else ../shared/fixtures/dev.
func fixture(t testing.TB, name string) string {
	t.Helper()
	if d := os.Getenv("NVMAI_GPU_FIXTURES"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			t.Skipf("fixture %s absent: %v", p, err)
		}
		return p
	}
	return testfix.Shared(t, "dev/"+name)
}

// qwen38Layouts are the two dev layouts of tiny-qwen38 (fixtures README).
var qwen38Layouts = []string{"tiny-qwen38-fused", "tiny-qwen38-perexpert"}

func loadEngine(t testing.TB, dir string, gpu bool) *runtime.Engine {
	t.Helper()
	opt := runtime.Options{Threads: 2}
	if gpu {
		opt.Device = model.GPU
	}
	e, err := runtime.Load(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// generate runs ids through a fresh session of KV width bits and returns
// the logits after the last prompt token and n greedy tokens.
func generate(t testing.TB, e *runtime.Engine, ids []int, n, bits int) ([]float32, []int) {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: bits})
	defer s.Close()
	return generateOn(t, s, ids, max(n, 1))
}

// TestQwen38GPUSixteenBitMatchesTransformers: 16-bit installs of both
// tiny-qwen38 layouts on the GPU engine, float32 KV: the logits after the
// last prompt token within 1e-3 of transformers' on every refs prompt (the
// <|endoftext|> one and the 850-token one, whose queries run past the
// indexer's dense window and grow the KV cache from 16 tokens) and the
// greedy continuations token for token.
func TestQwen38GPUSixteenBitMatchesTransformers(t *testing.T) {
	cudatest.Need(t)
	refs := testfix.LoadRefs(t, fixture(t, "tiny-qwen38.refs.json"))
	for _, layout := range qwen38Layouts {
		t.Run(layout, func(t *testing.T) {
			e := loadEngine(t, fixinstall.Install(t, fixture(t, layout), 16), true)
			for i, p := range refs {
				row, ids := generate(t, e, p.IDs, len(p.Greedy), 32)
				d := cudatest.MaxAbsDiff(row, p.LastLogits)
				t.Logf("FIDELITY qwen38 %s prompt %d (%d tokens): max |logit − transformers| = %.2e, greedy equal %v", layout, i, len(p.IDs), d, slices.Equal(ids, p.Greedy))
				if d > 1e-3 {
					t.Errorf("prompt %d: logits differ from transformers by %g", i, d)
				}
				if !slices.Equal(ids, p.Greedy) {
					t.Errorf("prompt %d: greedy %v, transformers %v", i, ids, p.Greedy)
				}
			}
		})
	}
}

// synthInstall writes a tiny-qwen38 synthetic install of bits once per
// test binary.
func synthInstall(t testing.TB, bits int) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("nvmai-qwen38gpu-synth-%d-%d", bits, os.Getpid()))
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
		return dir
	}
	if _, err := convert.Synth(context.Background(), convert.SynthOptions{Geometry: "tiny-qwen38", Bits: bits, Output: dir, Seed: 3, Threads: 2, Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// synthPrompt is a prompt of n ids with two EOS (n-gram resets) inside,
// long enough (n > 11) that its last queries run past tiny-qwen38's dense
// window.
func synthPrompt(n, eos int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1 + (i*7919)%4000
	}
	ids[n/3], ids[n/2] = eos, eos
	return ids
}

// TestQwen38GPUQuantizedMatchesCPUEngine: 4- and 8-bit synthetic
// tiny-qwen38 installs (and 4- and 8-bit fixture installs) give on the GPU
// the CPU engine's greedy continuations, at KV widths 32 and 8; the
// logits' relative distance is logged.
func TestQwen38GPUQuantizedMatchesCPUEngine(t *testing.T) {
	cudatest.Need(t)
	type tc struct {
		name string
		dir  func(t *testing.T) string
	}
	cases := []tc{
		{"synth-4bit", func(t *testing.T) string { return synthInstall(t, 4) }},
		{"synth-8bit", func(t *testing.T) string { return synthInstall(t, 8) }},
		// the synthetic n-gram tables are zeros: the fixture's trained one exercises the PLE layer
		{"fixture-4bit", func(t *testing.T) string { return fixinstall.Install(t, fixture(t, qwen38Layouts[0]), 4) }},
		{"fixture-8bit", func(t *testing.T) string { return fixinstall.Install(t, fixture(t, qwen38Layouts[0]), 8) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := c.dir(t)
			cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
			eos := cpu.Install.Manifest.Geometry.Qwen4Exp.PLEResetTokenID
			for _, bits := range []int{32, 8} {
				for _, n := range []int{7, 40, 150} {
					ids := synthPrompt(n, eos)
					wantRow, want := generate(t, cpu, ids, 24, bits)
					gotRow, got := generate(t, gpu, ids, 24, bits)
					t.Logf("FIDELITY qwen38 %s kv %d, %d-token prompt: logits rel. error vs CPU %.2e, greedy equal %v", c.name, bits, n, cudatest.RelErr(gotRow, wantRow), slices.Equal(got, want))
					if !slices.Equal(got, want) {
						t.Errorf("kv %d, %d tokens: GPU greedy %v, CPU %v", bits, n, got, want)
					}
				}
			}
		})
	}
}

// TestQwen38GPUChunkedPrefillEqualsSteps: a prompt fed whole (passes of
// up to DefaultChunk, the KV cache grown from 4 tokens) and fed token by
// token give bitwise the same last logits: every kernel gives a token the
// same arithmetic whatever the pass, the n-gram history and the PLE and
// GDN windows carry across passes.
func TestQwen38GPUChunkedPrefillEqualsSteps(t *testing.T) {
	cudatest.Need(t)
	e := loadEngine(t, synthInstall(t, 8), true)
	b := e.Model().(*Backend)
	ids := synthPrompt(300, e.Install.Manifest.Geometry.Qwen4Exp.PLEResetTokenID)
	newState := func() (cudatest.Sequence, error) { return b.Model.NewState(StateOptions{KVInitial: 4}) }
	V := b.Model.Config().VocabSize
	rows := [][]float32{cudatest.LastLogits(t, newState, ids, true, V), cudatest.LastLogits(t, newState, ids, false, V)}
	if d := cudatest.MaxAbsDiff(rows[0], rows[1]); d != 0 {
		t.Fatalf("whole prompt vs token by token: logits differ by %g", d)
	}
}

// TestQwen38GPUSampledOnDevice: sampled generation on the GPU engine picks
// every token on the device, and the picks are those of the CPU sampler
// over the same rows copied to the host (an OnLogits hook), seed for seed.
func TestQwen38GPUSampledOnDevice(t *testing.T) {
	cudatest.Need(t)
	e := loadEngine(t, fixinstall.Install(t, fixture(t, qwen38Layouts[0]), 16), true)
	b := e.Model().(*Backend)
	ids := e.Tokenizer.Encode("Once upon a")
	for _, p := range []sample.Params{
		{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7},
		{Temperature: 1, Seed: 4},
		{Temperature: 0.7, TopK: 20, RepetitionPenalty: 1.3, PresencePenalty: 0.5, Seed: 7},
		{Temperature: 0.7, TopP: 0.95, Seed: 7},
	} {
		run := func(rows bool) ([]int, int) {
			s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32})
			defer s.Close()
			opt := runtime.GenerateOptions{MaxTokens: 24, IgnoreEOS: true, Sampling: p}
			if rows {
				opt.OnLogits = func([]float32) error { return nil }
			}
			res, err := s.Generate(context.Background(), ids, opt)
			if err != nil {
				t.Fatal(err)
			}
			return res.IDs, b.last.samp.Sampled
		}
		host, _ := run(true)
		dev, served := run(false)
		t.Logf("FIDELITY qwen38 sampled %+v: device picks equal the host sampler's %v; %d of %d on the device", p, slices.Equal(dev, host), served, len(dev))
		if !slices.Equal(dev, host) {
			t.Errorf("%+v: device %v, host sampler %v", p, dev, host)
		}
		if served != len(dev) {
			t.Errorf("%+v: %d of %d picks on the device", p, served, len(dev))
		}
	}
}
