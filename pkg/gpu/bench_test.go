package gpu

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// TestBench measures each install named by NVMAI_GPU_BENCH (comma-separated
// directories): prefill of 512 tokens, decode of 128 (greedy, graph per
// token), and the device figures of BenchInfo; it prints BENCH lines and
// writes bench-<name>.json to $NVMAI_GPU_BENCH_OUT when set.
func TestBench(t *testing.T) {
	needGPU(t)
	for _, dir := range envDirs(t, "NVMAI_GPU_BENCH", "install to bench") {
		name := filepath.Base(dir)
		start := time.Now()
		e := loadEngine(t, dir, true)
		load := time.Since(start)
		b := e.Model().(*Backend)
		var first []int
		ahead0 := b.Model.stream != nil && b.Model.stream.readAhead
		mma20, attn0, fold0 := b.Model.ks.MMA2, b.Model.ks.AttnTiled, b.Model.ks.NormFold
		for _, v := range benchVariants(t) {
			if b.Model.stream != nil { // a new session captures its graph with or without the read-ahead
				b.Model.stream.readAhead = ahead0 && v.name != "noahead"
			}
			b.Dev.PDL, b.Model.fuse, b.Model.group, b.Model.splitGDN = v.pdl && b.Dev.PDLSupported(), v.fuse, v.group, v.split
			b.Model.mma, b.Model.ks.MMA2 = v.mma && b.Dev.Arch >= 80, mma20 && v.name != "nomma2" && v.name != "prev"
			if v.name == "mma2" || v.name == "mma2at" || v.name == "new" { // the tiled kernels, whatever NVMAI_GPU_MMA2 says
				b.Model.ks.MMA2 = b.Model.ks.MMA2Capable()
			}
			// The tiled prefill attention and the folded norms:
			// NVMAI_GPU_ATTN_TILED and NVMAI_GPU_NORMFOLD, or these variants.
			b.Model.ks.AttnTiled, b.Model.ks.NormFold = attn0 && v.name != "prev" && v.name != "noatile", fold0
			if v.name == "atile" || v.name == "mma2at" || v.name == "new" {
				b.Model.ks.AttnTiled = b.Model.ks.AttnTiledCapable()
			}
			if v.name == "nfold" || v.name == "new" {
				b.Model.ks.NormFold = true
			}
			b.Model.chunk, b.Model.gdnPipe, b.Model.gdnPar, b.Model.gdnReg = cmp.Or(v.chunk, 256), v.rec >= 1, v.rec >= 2, v.rec == 3
			carve := -1
			if v.carve {
				carve = gpukernels.UniformCarveout
			}
			if err := b.Dev.Do(func(c *cuda.Ctx) error { return b.Model.ks.SetCarveout(c, carve) }); err != nil {
				t.Fatal(err)
			}
			ids := benchOne(t, e, b, name+"."+v.name, load)
			// Every variant is the same arithmetic: the same greedy tokens.
			if first == nil {
				first = ids
			} else if !slices.Equal(ids, first) {
				t.Errorf("BENCH %s.%s: greedy tokens differ from the first variant's", name, v.name)
			}
		}
	}
}

// A bench variant switches the launch strategies (the results are bitwise
// the same; only the time differs).
type benchVariant struct {
	name                                string
	pdl, fuse, group, split, carve, mma bool
	chunk                               int // prefill tokens per pass (0: 256, the chunk before DefaultChunk)
	rec                                 int // the delta rule: 0 gdn_rec, 1 gdn_rec_pipe, 2 gdn_rec_par, 3 gdn_rec_reg
}

// benchVariants reads NVMAI_GPU_BENCH_VARIANTS (comma-separated; default
// all): all is the engine's defaults (PDL, fused decode launches, the
// column-split delta rule, prefill on the tensor cores), base none of them
// (the launches as before these changes), nopdl, nofuse, nosplit and nomma
// all but one, carve all plus one carve-out for every kernel, group all
// plus prefill's experts grouped by expert, group512 and group1024 that
// with prefill passes of 512 or 1024 tokens, pipe group with the delta rule
// as gdn_rec_pipe, pipe512 pipe with 512-token passes, par and par512 the
// same with gdn_rec_par, reg and reg512 with gdn_rec_reg, noahead all
// without the streamed experts' read-ahead (all has it unless
// NVMAI_GPU_READAHEAD=0; resident installs have none), nomma2 reg512
// with the tensor-core products as qgemm_mma / qgemm_grouped_mma, and mma2
// reg512 with session 17's tiled products, parallel conv and grouping
// (Set.MMA2) on; atile reg512 with session 19's tiled prefill attention
// (Set.AttnTiled) and mma2at mma2 with it, nfold reg512 with the decode
// norms folded into the products after them (Set.NormFold), new mma2 with
// both, noatile reg512 without the tiled attention, prev reg512 with
// neither the tiled products nor the tiled attention (the defaults before
// session 19, for rows comparable with earlier sessions'). The other
// variants keep the engine's Set.MMA2 and Set.AttnTiled (on unless
// NVMAI_GPU_MMA2=0 or NVMAI_GPU_ATTN_TILED=0) and Set.NormFold (off unless
// NVMAI_GPU_NORMFOLD=1). The variants' greedy tokens must agree.
func benchVariants(t *testing.T) []benchVariant {
	known := map[string]benchVariant{
		"all": {"all", true, true, false, true, false, true, 0, 0}, "base": {"base", false, false, false, false, false, false, 0, 0},
		"nopdl": {"nopdl", false, true, false, true, false, true, 0, 0}, "nofuse": {"nofuse", true, false, false, true, false, true, 0, 0},
		"nosplit": {"nosplit", true, true, false, false, false, true, 0, 0}, "nomma": {"nomma", true, true, false, true, false, false, 0, 0},
		"carve": {"carve", true, true, false, true, true, true, 0, 0}, "group": {"group", true, true, true, true, false, true, 0, 0},
		"group512": {"group512", true, true, true, true, false, true, 512, 0}, "group1024": {"group1024", true, true, true, true, false, true, 1024, 0},
		"pipe": {"pipe", true, true, true, true, false, true, 0, 1}, "pipe512": {"pipe512", true, true, true, true, false, true, 512, 1},
		"par": {"par", true, true, true, true, false, true, 0, 2}, "par512": {"par512", true, true, true, true, false, true, 512, 2},
		"reg": {"reg", true, true, true, true, false, true, 0, 3}, "reg512": {"reg512", true, true, true, true, false, true, 512, 3},
		"noahead": {"noahead", true, true, false, true, false, true, 0, 0}, "nomma2": {"nomma2", true, true, true, true, false, true, 512, 3},
		"mma2": {"mma2", true, true, true, true, false, true, 512, 3}, "atile": {"atile", true, true, true, true, false, true, 512, 3},
		"mma2at": {"mma2at", true, true, true, true, false, true, 512, 3}, "nfold": {"nfold", true, true, true, true, false, true, 512, 3},
		"new": {"new", true, true, true, true, false, true, 512, 3}, "prev": {"prev", true, true, true, true, false, true, 512, 3},
		"noatile": {"noatile", true, true, true, true, false, true, 512, 3},
	}
	spec := os.Getenv("NVMAI_GPU_BENCH_VARIANTS")
	if spec == "" {
		spec = "all"
	}
	var vs []benchVariant
	for _, n := range strings.Split(spec, ",") {
		v, ok := known[strings.TrimSpace(n)]
		if !ok {
			t.Fatalf("NVMAI_GPU_BENCH_VARIANTS: unknown variant %q", n)
		}
		vs = append(vs, v)
	}
	return vs
}

func benchOne(t *testing.T, e *runtime.Engine, b *Backend, name string, load time.Duration) []int {
	{
		prompt := make([]int, 512)
		for i := range prompt {
			prompt[i] = 1 + (i*7919)%(e.Install.Manifest.Geometry.VocabSize-1)
		}
		var runs []*runtime.Result
		st0, streamed, err := b.Model.StreamStats()
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			s := e.NewSession(runtime.SessionOptions{KVInitial: 1024, KVBits: 32})
			res, err := s.Generate(context.Background(), prompt, runtime.GenerateOptions{MaxTokens: 129, IgnoreEOS: true, PrefillChunk: 512})
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, res)
		}
		info, err := b.Measure(512, 64)
		if err != nil {
			t.Fatal(err)
		}
		best := func(f func(*runtime.Result) float64) (lo, hi float64) {
			lo, hi = f(runs[0]), f(runs[0])
			for _, r := range runs[1:] {
				lo, hi = min(lo, f(r)), max(hi, f(r))
			}
			return
		}
		if streamed {
			st1, _, err := b.Model.StreamStats()
			if err != nil {
				t.Fatal(err)
			}
			logStreamStats(t, name, b, st0, st1)
		}
		plo, phi := best(func(r *runtime.Result) float64 { return r.PrefillTokS })
		dlo, dhi := best(func(r *runtime.Result) float64 { return r.DecodeTokS })
		t.Logf("BENCH %s: load %.1fs; prefill 512: %.0f–%.0f tok/s; decode 128: %.1f–%.1f tok/s (3 runs)", name, load.Seconds(), plo, phi, dlo, dhi)
		t.Logf("BENCH %s: session step %.3f ms wall (upload id, replay, read the pick)", name, info.HostMsPerToken)
		t.Logf("BENCH %s: sampled session step %.3f ms wall (upload id, replay, sample on the device: T 0.7, top-k 20, top-p 0.95); the pick %.3f ms on the device, topk_cand %.3f ms of it", name, info.HostSampledMsPerToken, info.SampleMs, info.TopKMs)
		t.Logf("BENCH %s: graph %.3f ms/token (eager %.3f), %d kernels/token, empty graph of as many %.3f ms; weights %.0f MiB/token → %.0f GB/s = %.0f%% of copy %.0f GB/s",
			name, info.GraphMsPerToken, info.EagerMsPerToken, info.KernelsPerToken, info.EmptyGraphMs,
			float64(info.TokenBytes)/(1<<20), info.WeightBandwidth/1e9, 100*info.BandwidthShare, info.CopyBandwidth/1e9)
		for _, ph := range []string{PhaseEmbed, PhaseGDN, PhaseAttention, PhaseMoE, PhaseMLP, PhaseHead} {
			if ms, ok := info.PhaseMs[ph]; ok {
				t.Logf("BENCH %s: phase %-9s %.3f ms/token, %.0f MiB, %.0f GB/s", name, ph, ms, float64(info.PhaseBytes[ph])/(1<<20), info.PhaseBandwidth[ph]/1e9)
			}
		}
		var ks []string
		for k := range info.KernelMs {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool { return info.KernelMs[ks[i]] > info.KernelMs[ks[j]] })
		for _, k := range ks[:min(12, len(ks))] {
			t.Logf("BENCH %s: kernel %-22s %.3f ms/token", name, k, info.KernelMs[k])
		}
		ks = ks[:0]
		for k := range info.PrefillKernelMs {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool { return info.PrefillKernelMs[ks[i]] > info.PrefillKernelMs[ks[j]] })
		t.Logf("BENCH %s: prefill chunk of %d tokens, kernels one by one: %.2f ms (%.0f tok/s)", name, info.PrefillTokens, info.PrefillMs, float64(info.PrefillTokens)/(info.PrefillMs/1e3))
		for _, k := range ks[:min(10, len(ks))] {
			t.Logf("BENCH %s: prefill kernel %-22s %.3f ms/chunk", name, k, info.PrefillKernelMs[k])
		}
		if p := info.DecodeProfile; p != nil { // every row: the json has them too
			for _, line := range p.Lines(0) {
				t.Logf("BENCH %s: %s", name, line)
			}
		}
		if out := os.Getenv("NVMAI_GPU_BENCH_OUT"); out != "" {
			raw, _ := json.MarshalIndent(map[string]any{"runs": runs, "gpu": info}, "", "  ")
			os.WriteFile(filepath.Join(out, "bench-"+name+".json"), raw, 0o644)
		}
		return runs[0].IDs
	}
}

// logStreamStats prints the streamed experts' decode figures over the
// bench's runs (from before to after): the VRAM hit rate, the read-ahead's
// guesses right and copies used, and the PCIe bytes a decode step copied,
// on demand and ahead.
func logStreamStats(t *testing.T, name string, b *Backend, before, after StreamStats) {
	d := func(a, b int64) float64 { return float64(a - b) }
	picks := d(after.DecodeHits, before.DecodeHits) + d(after.DecodeMisses, before.DecodeMisses)
	layers := 0
	for _, sl := range b.Model.stream.layers {
		if sl != nil {
			layers++
		}
	}
	steps := max(picks/float64(max(b.Model.geom.k*layers, 1)), 1)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return 100 * a / b
	}
	t.Logf("BENCH %s: streamed, read-ahead %v: decode VRAM hits %.1f%% of %.0f picks; guesses right %.1f%% (%.0f guesses), copies ahead used %.1f%% (%.0f copied); PCIe %.1f MiB/step on demand + %.1f MiB/step ahead (%.0f steps)",
		name, b.Model.stream.readAhead, ratio(d(after.DecodeHits, before.DecodeHits), picks), picks,
		ratio(d(after.Guessed, before.Guessed), d(after.Guesses, before.Guesses)), d(after.Guesses, before.Guesses),
		ratio(d(after.AheadUsed, before.AheadUsed), d(after.AheadCopies, before.AheadCopies)), d(after.AheadCopies, before.AheadCopies),
		d(after.DecodeBytes, before.DecodeBytes)/float64(1<<20)/steps, d(after.AheadBytes, before.AheadBytes)/float64(1<<20)/steps, steps)
}
