package gpu

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The GPU engine registers both qwen35 architectures, counts no host
// memory for a sequence (it is in device memory) at the KV width asked,
// and refuses YaRN (its
// kernels take plain inverse frequencies) before it opens a device.
func TestGPURegistersAndRefusesYaRNFirst(t *testing.T) {
	for _, arch := range []string{qwen35.ArchMoE, qwen35.ArchDense} {
		if e, err := model.Lookup(arch, model.GPU); err != nil || !e.HoldsExperts {
			t.Errorf("Lookup(%s, gpu) = %+v, %v", arch, e, err)
		}
	}
	dir := install(t, "tiny-moe-fused", 4)
	in, err := runtime.OpenInstall(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	// The KV width is --kv-bits, the CPU engine's default when not given.
	for _, tc := range []struct{ ask, want int }{{0, model.DefaultKVBits}, {16, 16}, {32, 32}, {8, 8}} {
		f, err := Footprint(model.FootprintRequest{Manifest: in.Manifest, MaxContext: 64, KVBits: tc.ask})
		if err != nil || f.KV != 0 || f.Recurrent != 0 || f.Attention != 0 || f.PassScratch != 0 || f.KVBits != tc.want || f.MaxContext != 64 {
			t.Errorf("GPU footprint at --kv-bits %d: %+v, %v: want no host memory for the sequence, %d-bit KV, 64 tokens", tc.ask, f, err, tc.want)
		}
	}
	if _, err := Footprint(model.FootprintRequest{Manifest: in.Manifest, KVBits: 4}); err == nil || !strings.Contains(err.Error(), "8, 16 or 32") {
		t.Errorf("GPU footprint at 4-bit KV: %v, want a refusal", err)
	}
	_, err = Loader(model.Request{Dir: dir, Manifest: in.Manifest, Weights: in, RopeScaling: model.RopeYaRN})
	if err == nil || !strings.Contains(err.Error(), "--engine cpu") {
		t.Errorf("a YaRN model on the GPU engine: %v, want a refusal", err)
	}
}

func TestBenchSummary(t *testing.T) {
	info := &BenchInfo{Device: "NVIDIA H200", GraphMsPerToken: 5, KernelsPerToken: 816, TokenBytes: 1 << 30, WeightBandwidth: 2e11,
		CopyBandwidth: 4e12, BandwidthShare: 0.05, PhaseMs: map[string]float64{PhaseMoE: 3}, PhaseBytes: map[string]int64{PhaseMoE: 1 << 29},
		PhaseBandwidth: map[string]float64{PhaseMoE: 1e11}}
	got := strings.Join(info.Summary(), "\n")
	for _, want := range []string{"NVIDIA H200", "816 kernels", "1024 MiB", "5% of the 4000 GB/s", "phase moe"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if s := (&BenchInfo{Error: "boom"}).Summary(); len(s) != 1 || !strings.Contains(s[0], "boom") {
		t.Errorf("error summary %v", s)
	}
}

func TestGroupedPrefillFollowsTheTensorCores(t *testing.T) {
	cases := []struct {
		env  string
		mma  bool
		want bool
	}{{"", true, true}, {"", false, false}, {"0", true, false}, {"1", false, true}, {"x", true, true}}
	for _, c := range cases {
		if got := groupedPrefill(c.env, c.mma); got != c.want {
			t.Errorf("groupedPrefill(%q, mma %v) = %v, want %v", c.env, c.mma, got, c.want)
		}
	}
}

func TestChunkFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
		err  bool
	}{{"", DefaultChunk, false}, {"256", 256, false}, {"1024", 1024, false}, {"0", 0, true}, {"1025", 0, true}, {"x", 0, true}} {
		got, err := chunkFromEnv(tc.env)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("chunkFromEnv(%q) = %d, %v; want %d (error %v)", tc.env, got, err, tc.want, tc.err)
		}
	}
}
