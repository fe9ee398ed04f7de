package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// The fixtures are read from $NVMAI_GPU_FIXTURES (a copy the GPU machine
// gets, since ../shared does not travel there), else ../shared/fixtures/dev.
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

// needGPU skips (one line saying why) unless a GPU is usable; NVMAI_GPU=1
// turns the skip into a failure.
func needGPU(t testing.TB) { cudatest.Need(t) }

// install converts a fixture snapshot once per test run (fixinstall).
func install(t testing.TB, snapshot string, bits int) string {
	t.Helper()
	return fixinstall.Install(t, fixture(t, snapshot), bits)
}

func TestMain(m *testing.M) { fixinstall.Main(m) }

type refPrompt = testfix.RefPrompt

func loadRefs(t testing.TB, name string) []refPrompt {
	t.Helper()
	return testfix.LoadRefs(t, fixture(t, name))
}

func loadEngine(t testing.TB, dir string, gpu bool) *runtime.Engine {
	t.Helper()
	opt := runtime.Options{Threads: 4}
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

// lastLogits runs ids through a fresh session and returns the last row.
func lastLogits(t testing.TB, e *runtime.Engine, ids []int) []float32 {
	t.Helper()
	V := e.Install.Manifest.Geometry.VocabSize
	var row []float32
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32})
	defer s.Close()
	_, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: 1, IgnoreEOS: true, OnLogits: func(r []float32) error {
		row = slices.Clone(r)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(row) != V {
		t.Fatalf("got %d logits, want %d", len(row), V)
	}
	return row
}

func greedy(t testing.TB, e *runtime.Engine, ids []int, n int) []int {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32})
	defer s.Close()
	res, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: n, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return res.IDs
}

// 16-bit installs of the three fixtures on the GPU: last-token logits
// within 1e-3 of transformers' on every refs prompt (the long ones too,
// which grow the KV cache from 16 tokens) and the greedy continuations
// token for token.
func TestSixteenBitMatchesTransformers(t *testing.T) {
	needGPU(t)
	for _, tc := range []struct{ snapshot, refs string }{
		{"tiny-moe-fused", "tiny-moe.refs.json"},
		{"tiny-moe-perexpert", "tiny-moe.refs.json"},
		{"tiny-dense", "tiny-dense.refs.json"},
	} {
		t.Run(tc.snapshot, func(t *testing.T) {
			e := loadEngine(t, install(t, tc.snapshot, 16), true)
			for i, p := range loadRefs(t, tc.refs) {
				d := cudatest.MaxAbsDiff(lastLogits(t, e, p.IDs), p.LastLogits)
				t.Logf("FIDELITY %s prompt %d (%d tokens): max |logit − transformers| = %.2e", tc.snapshot, i, len(p.IDs), d)
				if d > 1e-3 {
					t.Errorf("prompt %d: logits differ from transformers by %g", i, d)
				}
				if got := greedy(t, e, p.IDs, len(p.Greedy)); !slices.Equal(got, p.Greedy) {
					t.Errorf("prompt %d: greedy %v, transformers %v", i, got, p.Greedy)
				}
			}
		})
	}
}

// 4- and 8-bit installs: the GPU's greedy continuations of the probes equal
// the CPU engine's, and so (bitwise, the int8 paths agreeing) nearly do
// the logits.
func TestQuantizedMatchesCPUEngine(t *testing.T) {
	needGPU(t)
	probes := []string{"The capital of France is", "Once upon a", "The quick brown fox jumps over the lazy"}
	for _, snapshot := range []string{"tiny-moe-fused", "tiny-dense"} {
		for _, bits := range []int{4, 8} {
			t.Run(fmt.Sprintf("%s/%d", snapshot, bits), func(t *testing.T) {
				dir := install(t, snapshot, bits)
				cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
				for _, p := range probes {
					ids := cpu.Tokenizer.Encode(p)
					rel := cudatest.RelErr(lastLogits(t, gpu, ids), lastLogits(t, cpu, ids))
					want, got := greedy(t, cpu, ids, 24), greedy(t, gpu, ids, 24)
					t.Logf("FIDELITY %s %d-bit %q: logits rel. error vs CPU %.2e, greedy equal %v", snapshot, bits, p, rel, slices.Equal(got, want))
					if !slices.Equal(got, want) {
						t.Errorf("%q: GPU greedy %v, CPU %v", p, got, want)
					}
					if rel > 1e-4 {
						t.Errorf("%q: logits differ from the CPU engine's by %.2e (relative)", p, rel)
					}
				}
			})
		}
	}
}

// The same prompt twice gives bitwise the same logits, through prefill
// chunks and decode graphs alike.
func TestBitwiseRepeatable(t *testing.T) {
	needGPU(t)
	e := loadEngine(t, install(t, "tiny-moe-fused", 4), true)
	ids := loadRefs(t, "tiny-moe.refs.json")[0].IDs
	a, b := lastLogits(t, e, ids), lastLogits(t, e, ids)
	if !slices.Equal(a, b) {
		t.Fatal("two runs of one prompt gave different logits")
	}
	g1, g2 := greedy(t, e, ids, 32), greedy(t, e, ids, 32)
	if !slices.Equal(g1, g2) {
		t.Fatal("two greedy runs differ")
	}
}

// Prefill in one chunk equals feeding the prompt token by token (decode
// graphs): the GPU's kernels give every token the same arithmetic.
func TestChunkedPrefillEqualsSteps(t *testing.T) {
	needGPU(t)
	e := loadEngine(t, install(t, "tiny-moe-fused", 8), true)
	b := e.Model().(*Backend)
	ids := loadRefs(t, "tiny-moe.refs.json")[0].IDs
	newState := func() (cudatest.Sequence, error) { return b.Model.NewState(StateOptions{KVInitial: 4}) }
	V := e.Install.Manifest.Geometry.VocabSize
	rows := [][]float32{cudatest.LastLogits(t, newState, ids, true, V), cudatest.LastLogits(t, newState, ids, false, V)}
	if !slices.Equal(rows[0], rows[1]) {
		t.Fatalf("chunked prefill and single steps differ: max %g", cudatest.MaxAbsDiff(rows[0], rows[1]))
	}
}

// envDirs returns the directories the environment variable name lists
// (filepath.SplitList), skipping the test when it names no such install
// (what).
func envDirs(t *testing.T, name, what string) []string {
	t.Helper()
	dirs := os.Getenv(name)
	if dirs == "" {
		t.Skipf("%s names no %s", name, what)
	}
	return filepath.SplitList(dirs)
}

// A synthetic install named by NVMAI_SYNTH_DIRS (comma-separated; made on
// the GPU machine by nvmai-convert synth): GPU vs CPU engine logits and 64
// greedy tokens.
func TestSyntheticMatchesCPUEngine(t *testing.T) {
	needGPU(t)
	for _, dir := range envDirs(t, "NVMAI_SYNTH_DIRS", "synthetic install") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
			ids := make([]int, 24)
			for i := range ids {
				ids[i] = 100 + 37*i
			}
			rel := cudatest.RelErr(lastLogits(t, gpu, ids), lastLogits(t, cpu, ids))
			want, got := greedy(t, cpu, ids, 64), greedy(t, gpu, ids, 64)
			same := 0
			for same < len(want) && got[same] == want[same] {
				same++
			}
			t.Logf("FIDELITY %s: logits rel. error vs CPU %.2e; greedy agrees for %d of 64 tokens", filepath.Base(dir), rel, same)
			if same != len(want) {
				t.Errorf("greedy differs from token %d", same)
			}
			if rel > 1e-3 {
				t.Errorf("logits relative error %.2e", rel)
			}
			// Sampled on the device, at the full vocabulary: the generation
			// config, no filter, and top-p alone (the radix-selected cut).
			for _, p := range []sample.Params{sampleParams[0], sampleParams[3], sampleParams[8]} {
				sw, _ := sampledTokens(t, cpu, ids, 24, p, false)
				sg, served := sampledTokens(t, gpu, ids, 24, p, false)
				t.Logf("FIDELITY %s sampled (T=%v k=%d p=%v seed %d): GPU equals CPU engine %v; %d of %d picks on the device",
					filepath.Base(dir), p.Temperature, p.TopK, p.TopP, p.Seed, slices.Equal(sg, sw), served, len(sg))
				if !slices.Equal(sg, sw) || served != len(sg) {
					t.Errorf("sampled %+v: GPU %v, CPU %v (%d picks on the device)", p, sg, sw, served)
				}
			}
		})
	}
}
