package gpu

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// sampledTokens generates n tokens with p; rows makes the session copy each
// logits row to the CPU sampler (an OnLogits hook). It returns the tokens
// and, on the GPU, how many picks the device decided.
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
	if b, ok := e.Model().(*Backend); ok && b.last != nil {
		served = b.last.samp.Sampled
	}
	return res.IDs, served
}

// sampleParams are the settings the sampled checks run: the fixture's
// generation config, small and large k, min-p, no filter at all, penalties
// (sampled and greedy), a top-k past the candidate list, and top-p without
// top-k. Every pick must be the device's.
var sampleParams = []sample.Params{
	{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7},
	{Temperature: 1, TopK: 5, Seed: 1},
	{Temperature: 1.5, TopK: 200, TopP: 0.9, MinP: 0.01, Seed: 3},
	{Temperature: 1, Seed: 4},
	{Temperature: 0.7, TopK: 20, RepetitionPenalty: 1.3, PresencePenalty: 0.5, Seed: 7},
	{RepetitionPenalty: 1.3, FrequencyPenalty: 0.4},
	{Temperature: 0.8, TopK: 2000, MinP: 0.02, Seed: 5},
	{Temperature: 0.7, TopK: 2000, TopP: 0.9, Seed: 6},
	{Temperature: 0.7, TopP: 0.95, Seed: 7},
	{Temperature: 1.2, TopP: 0.99, MinP: 0.001, Seed: 8},
}

// Sampling on the GPU gives the tokens of the CPU sampler over the copied
// row and of the CPU engine, seed for seed; and topk_cand lists
// sample.TopKCandidates of a real row exactly.
func TestSampledMatchesCPUSampler(t *testing.T) {
	needGPU(t)
	dir := install(t, "tiny-moe-fused", 4)
	cpu, gpu := loadEngine(t, dir, false), loadEngine(t, dir, true)
	for _, prompt := range []string{"Once upon a", "The capital of France is"} {
		ids := cpu.Tokenizer.Encode(prompt)
		for _, p := range sampleParams {
			want, _ := sampledTokens(t, cpu, ids, 32, p, false)
			rows, _ := sampledTokens(t, gpu, ids, 32, p, true)
			dev, served := sampledTokens(t, gpu, ids, 32, p, false)
			t.Logf("FIDELITY sampled %q T=%v k=%d p=%v min_p=%v rep=%v pres=%v freq=%v seed=%d: GPU equals CPU engine %v, equals GPU rows %v; %d of %d picks on the device",
				prompt, p.Temperature, p.TopK, p.TopP, p.MinP, p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty, p.Seed,
				slices.Equal(dev, want), slices.Equal(dev, rows), served, len(dev))
			if !slices.Equal(dev, want) || !slices.Equal(rows, want) {
				t.Errorf("%q %+v: GPU %v, GPU rows %v, CPU %v", prompt, p, dev, rows, want)
			}
			if served != len(dev) {
				t.Errorf("%q %+v: %d of %d picks on the device", prompt, p, served, len(dev))
			}
		}
	}
	// TopK itself against the reference, on a real row.
	b := gpu.Model().(*Backend)
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
		ids, logits, ok, err := topKOnDevice(st, k)
		if err != nil || !ok || !slices.Equal(ids, wi) || !bitsEqual(logits, wl) {
			t.Fatalf("topk_cand(%d) = %d candidates, ok %v, err %v; want %d equal to the reference", k, len(ids), ok, err, len(wi))
		}
	}
}

// topKOnDevice lists the last token's top-k candidates as topk_cand
// computes them on the device (ids ascending, raw logits); ok is false for
// a row with a NaN or +Inf, or more candidates than MaxCandidates.
func topKOnDevice(st *State, k int) (ids []int32, logits []float32, ok bool, err error) {
	buf := make([]int32, 4+2*MaxCandidates)
	err = st.m.dev.Do(func(c *cuda.Ctx) error {
		l := &gpukernels.Launcher{C: c, K: st.m.ks}
		if err := l.TopKCand(st.cand, st.s.logits, st.m.geom.V, k, MaxCandidates); err != nil {
			return err
		}
		return c.DtoH(cuda.Bytes(buf), st.cand)
	})
	n := int(buf[0])
	if err != nil || buf[1] != 0 || n < 1 || n > MaxCandidates {
		return nil, nil, false, err
	}
	for i := range n {
		ids, logits = append(ids, buf[4+2*i]), append(logits, math.Float32frombits(uint32(buf[5+2*i])))
	}
	return ids, logits, true, nil
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// The device's pick is sample.Reference's, bit for bit, on rows written
// straight into a state's logits: peaked and flat, with ties, ±0 and −Inf,
// every setting of sampleParams with a growing penalty history; it declines
// (ok false) exactly the rows the host must report (NaN, +Inf, all −Inf).
func TestDeviceSampleIsTheReference(t *testing.T) {
	needGPU(t)
	gpu := loadEngine(t, install(t, "tiny-moe-fused", 4), true)
	b := gpu.Model().(*Backend)
	st, err := b.Model.NewState(StateOptions{KVInitial: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	V := b.Model.geom.V
	put := func(row []float32) {
		t.Helper()
		err := b.Model.dev.Do(func(c *cuda.Ctx) error {
			if err := c.HtoD(st.s.logits, cuda.Bytes(row)); err != nil {
				return err
			}
			return (&gpukernels.Launcher{C: c, K: b.Model.ks}).Argmax(st.next, st.s.logits, V)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	negInf := float32(math.Inf(-1))
	for pi, p := range sampleParams {
		s, _ := sample.New(p)
		decided := 0
		for step := range 60 {
			scale := []float64{0.5, 3, 12}[step%3]
			row := make([]float32, V)
			for i := range row {
				switch x := r.IntN(25); {
				case x == 0:
					row[i] = negInf
				case x < 4:
					row[i] = float32(r.IntN(5)) - 2
				case x == 4:
					row[i] = float32(math.Copysign(0, -1))
				default:
					row[i] = float32(r.NormFloat64() * scale)
				}
			}
			put(row)
			ns := s.Next()
			want, err := sample.Reference(ns, s.History(), row)
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := st.Sample(ns, s.History())
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				decided++
				if got != want {
					t.Fatalf("params %d step %d (%+v): the device picks %d, the reference %d", pi, step, p, got, want)
				}
			}
			s.Accept(want)
		}
		t.Logf("FIDELITY device sampling %+v: %d of 60 random rows decided on the device, all equal to the reference", p, decided)
		if decided != 60 {
			t.Errorf("%+v: the device decided %d of 60 rows", p, decided)
		}
	}
	for _, bad := range [][]float32{{float32(math.NaN())}, {float32(math.Inf(1))}, {negInf}} {
		row := make([]float32, V)
		for i := range row {
			row[i] = bad[0]
			if bad[0] != negInf && i != 77 {
				row[i] = float32(i % 7)
			}
		}
		put(row)
		for _, p := range []sample.Params{sampleParams[0], sampleParams[3], sampleParams[8]} {
			s, _ := sample.New(p)
			if _, ok, err := st.Sample(s.Next(), nil); ok || err != nil {
				t.Errorf("row with %v, %+v: ok %v, err %v; want it handed to the host", bad[0], p, ok, err)
			}
		}
	}
}
