package gpu

import (
	"strings"
	"testing"
)

func TestLoaderFor(t *testing.T) {
	for _, tc := range []struct {
		engine string
		gpu    bool
		err    bool
	}{{"", false, false}, {"cpu", false, false}, {"GPU", true, false}, {"tpu", false, true}} {
		l, err := LoaderFor(tc.engine)
		if (err != nil) != tc.err || (l != nil) != tc.gpu {
			t.Errorf("LoaderFor(%q) = %v, %v", tc.engine, l != nil, err)
		}
		if err != nil && !strings.Contains(err.Error(), "cpu, gpu") {
			t.Errorf("LoaderFor(%q): %v does not list the engines", tc.engine, err)
		}
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
