package runtime

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// TestBench runs the benchmark on the 4-bit tiny MoE and checks its report:
// labels, one run per fixed prompt with the asked-for lengths, decode-only
// cache figures that add up, medians that are medians, and the in-process
// memory and disk rates.
func TestBench(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	e, err := Load(dir, Options{Threads: 2, Experts: ExpertOptions{Slots: 6}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const tokens, promptTokens = 5, 12
	r, err := e.Bench(context.Background(), BenchOptions{Tokens: tokens, PromptTokens: promptTokens, Warmup: 16,
		MemBandwidthBytes: 1 << 20, DiskReads: 8})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Engine, "nvmai/") || r.Width != 4 || r.Threads != 2 || r.Layers != 8 || r.Experts != 16 || r.SlotsPerLayer != 6 || r.IOThreads < 1 || r.IOMode == "" {
		t.Errorf("labels: %+v", r)
	}
	if len(r.Runs) != len(BenchPrompts) {
		t.Fatalf("%d runs, want one per prompt (%d)", len(r.Runs), len(BenchPrompts))
	}
	stride := float64(e.Install.Manifest.Experts.Stride)
	for i, run := range r.Runs {
		if run.Prompt != BenchPrompts[i].Name || run.PromptTokens != promptTokens || run.Generated != tokens {
			t.Errorf("run %d: %+v", i, run)
		}
		if !(run.PrefillTokS > 0 && run.DecodeTokS > 0 && run.PeakRSS > 0 && run.HitRate >= 0 && run.HitRate <= 1) {
			t.Errorf("run %s: implausible figures %+v", run.Prompt, run)
		}
		// Every miss reads one stride; the decode fed back tokens−1 tokens.
		if want := float64(run.Misses) * stride / (tokens - 1); math.Abs(run.BytesPerToken-want) > 1e-6*want {
			t.Errorf("run %s: %g bytes per token for %d misses, want %g", run.Prompt, run.BytesPerToken, run.Misses, want)
		}
	}
	if got, want := r.Median.DecodeTokS, median([]float64{r.Runs[0].DecodeTokS, r.Runs[1].DecodeTokS, r.Runs[2].DecodeTokS}); got != want {
		t.Errorf("median decode %g, want %g", got, want)
	}
	if r.WeightBytesPerToken != DecodeWeightBytes(e.Install.Manifest) || r.WeightBytesPerToken <= 0 {
		t.Errorf("weight bytes per token %d", r.WeightBytesPerToken)
	}
	if math.Abs(r.WeightRate-float64(r.WeightBytesPerToken)*r.Median.DecodeTokS) > 1e-6*r.WeightRate {
		t.Errorf("weight rate %g for %d bytes at %g tok/s", r.WeightRate, r.WeightBytesPerToken, r.Median.DecodeTokS)
	}
	if r.MemRead[1] <= 0 || r.MemRead[2] <= 0 || r.DiskRead <= 0 {
		t.Errorf("rates: memory %v, disk %g", r.MemRead, r.DiskRead)
	}
	for t2 := 1; t2 <= 2; t2++ {
		if r.WeightMemRead[t2] <= 0 || r.WeightMemReadBest[t2] < r.WeightMemRead[t2] {
			t.Errorf("%d threads: weight-memory read median %g, best %g", t2, r.WeightMemRead[t2], r.WeightMemReadBest[t2])
		}
		if r.MemReadBest[t2] < r.MemRead[t2] {
			t.Errorf("%d threads: best read %g below the median %g", t2, r.MemReadBest[t2], r.MemRead[t2])
		}
	}
	// The state a step reads grows with its position: between the state at
	// the prompt's end and at the last step.
	run, cfg := r.Runs[0], cpuModel(t, e).Config()
	lo, hi := float64(cfg.StateBytesAt(run.PromptTokens+1, qwen35.DefaultKVBits)), float64(cfg.StateBytesAt(run.PromptTokens+run.Generated-1, qwen35.DefaultKVBits))
	if run.StateBytesPerToken < lo || run.StateBytesPerToken > hi || lo <= 0 {
		t.Errorf("state bytes per token %g, want within [%g, %g]", run.StateBytesPerToken, lo, hi)
	}
	if want := (float64(r.WeightBytesPerToken) + r.Median.StateBytesPerToken) * r.Median.DecodeTokS; math.Abs(r.ReadRate-want) > 1e-6*want {
		t.Errorf("read rate %g, want %g", r.ReadRate, want)
	}
	checkBenchPhases(t, r, e.Install.Manifest)
}

// checkBenchPhases: the phases' shares add up to one, and the bytes their
// products read per step to the weights a step reads but the embedding row
// (a lookup, not a product).
func checkBenchPhases(t *testing.T, r *BenchReport, m *packexperts.Manifest) {
	var share, products float64
	for _, p := range r.Phases {
		share += p.Share
		switch p.Name {
		case "gdn_conv", "gdn_heads", "attn_heads": // state, not products
		default:
			products += p.BytesPerToken
		}
	}
	if math.Abs(share-1) > 1e-9 || len(r.Phases) < 10 {
		t.Errorf("%d phases, shares sum to %g", len(r.Phases), share)
	}
	var embedRow int64
	for _, tn := range m.Tensors {
		if tn.Name == "model.embed_tokens.weight" {
			embedRow = tensorBytes(tn) / tn.Shape[0]
		}
	}
	if want := float64(r.WeightBytesPerToken - embedRow); math.Abs(products-want) > 1e-6*want {
		t.Errorf("the phases' products read %g bytes per step, want %g", products, want)
	}
}

// TestBenchPromptIDs: a prompt is repeated or cut to exactly the asked-for
// number of tokens, and starts with the prompt's own tokens.
func TestBenchPromptIDs(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 8), Options{Threads: 1, Experts: ExpertOptions{Slots: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, p := range BenchPrompts {
		own := e.Tokenizer.Encode(p.Text)
		for _, n := range []int{1, len(own), 3*len(own) + 1} {
			ids, err := e.benchPromptIDs(p, n)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) != n {
				t.Errorf("%s: %d tokens, want %d", p.Name, len(ids), n)
			}
			for i := range min(n, len(own)) - 1 { // the last own token may merge with the repeat
				if ids[i] != own[i] {
					t.Errorf("%s: token %d is %d, the prompt's own is %d", p.Name, i, ids[i], own[i])
					break
				}
			}
		}
	}
}

// TestDecodeWeightBytes: every matrix but the embedding, one embedding row,
// and top-k experts per MoE layer.
func TestDecodeWeightBytes(t *testing.T) {
	in, err := OpenInstall(install(t, "tiny-moe-fused", 4))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	man := in.Manifest
	var want int64
	for _, tn := range man.Tensors {
		if len(tn.Shape) != 2 {
			continue
		}
		n := tensorBytes(tn)
		if tn.Name == "model.embed_tokens.weight" {
			n /= tn.Shape[0]
		}
		want += n
	}
	var expert int64
	for _, p := range man.Experts.Parts {
		expert += tensorBytes(p)
	}
	want += int64(man.Experts.TopK*len(man.Experts.Layers)) * expert
	if got := DecodeWeightBytes(man); got != want || expert > man.Experts.Stride {
		t.Errorf("DecodeWeightBytes = %d, want %d (expert %d of stride %d)", got, want, expert, man.Experts.Stride)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %g, want %g", tc.in, got, tc.want)
		}
	}
}

func TestRepeatIDsCutsOrRepeatsToLength(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		n    int
		want []int
	}{
		{[]int{1, 2, 3}, 0, []int{1, 2, 3}},
		{[]int{1, 2, 3}, 2, []int{1, 2}},
		{[]int{1, 2, 3}, 7, []int{1, 2, 3, 1, 2, 3, 1}},
	} {
		if got := repeatIDs(tc.ids, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("repeatIDs(%v, %d) = %v, want %v", tc.ids, tc.n, got, tc.want)
		}
	}
}
