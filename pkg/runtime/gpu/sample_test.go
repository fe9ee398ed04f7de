package gpu

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/runtime/sample"
)

// sampledTokens generates n tokens with p; rows makes the session copy each
// logits row to the CPU sampler (an OnLogits hook), as before device
// candidates. It returns the tokens and, on the GPU, how many picks the
// device's candidates served.
func sampledTokens(t testing.TB, e *runtime.Engine, ids []int, n int, p sample.Params, rows bool) ([]int, int) {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32})
	defer s.Close()
	opt := runtime.GenerateOptions{MaxTokens: n, IgnoreEOS: true, Sampling: p}
	if rows {
		opt.OnLogits = func([]float32) error { return nil }
	}
	res, err := s.Generate(context.Background(), ids, opt)
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	if b, ok := e.Backend().(*Backend); ok && b.last != nil {
		served = b.last.topKServed
	}
	return res.IDs, served
}

// sampleParams are the settings the sampled checks run: the fixture's
// generation config, small and large k, min-p, and two that need the whole
// row (no top-k; a penalty).
var sampleParams = []struct {
	p      sample.Params
	device bool // served by the device's candidates
}{
	{sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7}, true},
	{sample.Params{Temperature: 1, TopK: 5, Seed: 1}, true},
	{sample.Params{Temperature: 1.5, TopK: 200, TopP: 0.9, MinP: 0.01, Seed: 3}, true},
	{sample.Params{Temperature: 0.7, TopP: 0.95, Seed: 7}, false},
	{sample.Params{Temperature: 0.7, TopK: 20, RepetitionPenalty: 1.3, Seed: 7}, false},
}

// Sampling on the GPU (top-k candidates on the device, the draw on the
// host) gives the tokens of the CPU sampler over the copied row and of the
// CPU engine, seed for seed; and TopK lists sample.TopKCandidates of the
// row exactly.
func TestSampledMatchesCPUSampler(t *testing.T) {
	needGPU(t)
	dir := install(t, "tiny-moe-fused", 4)
	cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
	for _, prompt := range []string{"Once upon a", "The capital of France is"} {
		ids := cpu.Tokenizer.Encode(prompt)
		for _, tc := range sampleParams {
			want, _ := sampledTokens(t, cpu, ids, 32, tc.p, false)
			rows, _ := sampledTokens(t, gpu, ids, 32, tc.p, true)
			dev, served := sampledTokens(t, gpu, ids, 32, tc.p, false)
			t.Logf("FIDELITY sampled %q T=%v k=%d p=%v min_p=%v rep=%v seed=%d: GPU equals CPU engine %v, equals GPU rows %v; %d of %d picks from device candidates",
				prompt, tc.p.Temperature, tc.p.TopK, tc.p.TopP, tc.p.MinP, tc.p.RepetitionPenalty, tc.p.Seed, slices.Equal(dev, want), slices.Equal(dev, rows), served, len(dev))
			if !slices.Equal(dev, want) || !slices.Equal(rows, want) {
				t.Errorf("%q %+v: GPU %v, GPU rows %v, CPU %v", prompt, tc.p, dev, rows, want)
			}
			if wantServed := map[bool]int{true: len(dev), false: 0}[tc.device]; served != wantServed {
				t.Errorf("%q %+v: %d picks from device candidates, want %d", prompt, tc.p, served, wantServed)
			}
		}
	}
	// TopK itself against the reference, on a real row.
	b := gpu.Backend().(*Backend)
	st, err := b.Model.NewState(StateOptions{KVInitial: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Forward(cpu.Tokenizer.Encode("Once upon a")); err != nil {
		t.Fatal(err)
	}
	row := make([]float32, b.Model.geom.V)
	if err := st.Logits(row); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 20, 1000} {
		wi, wl := sample.TopKCandidates(row, k)
		ids, logits := make([]int32, MaxCandidates), make([]float32, MaxCandidates)
		n, ok, err := st.TopK(k, ids, logits)
		if err != nil || !ok || !slices.Equal(ids[:n], wi) || !bitsEqual(logits[:n], wl) {
			t.Fatalf("TopK(%d) = %d candidates, ok %v, err %v; want %d equal to the reference", k, n, ok, err, len(wi))
		}
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
