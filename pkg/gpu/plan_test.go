package gpu

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// PlanExperts keeps a model resident when the budget holds every expert,
// streams with as many slots a layer as the rest of the budget holds, and
// refuses, with the numbers, a budget below 3·top-k slots a layer or one
// that cannot hold the trunk, the state and the staging buffer.
func TestPlanExperts(t *testing.T) {
	const mib = 1 << 20
	base := PlanInput{TrunkBytes: 1024 * mib, StateBytes: 256 * mib, PlanContext: 4096, Stride: mib, Layers: 10, Experts: 64, TopK: 4}
	for _, tc := range []struct {
		name   string
		budget int64
		force  int
		slots  int    // want, when no error
		err    string // want a refusal containing this
	}{
		{name: "every expert fits", budget: 2048 * mib, slots: 64},
		{name: "exactly fits", budget: (1024 + 256 + 640) * mib, slots: 64},
		{name: "one byte short streams", budget: (1024+256+640)*mib - 1, slots: 57},
		{name: "streamed", budget: 1536 * mib, slots: 19}, // (1536 − 1280 − 64) / 10
		{name: "3·top-k slots", budget: (1280 + 64 + 120) * mib, slots: 12},
		{name: "below 3·top-k", budget: (1280+64+120)*mib - 1, err: "below 3·top-k = 12 slots"},
		{name: "no room for the trunk", budget: 1300 * mib, err: "cannot hold the trunk"},
		{name: "forced", budget: 4096 * mib, force: 6, slots: 6},
		{name: "forced below top-k", budget: 4096 * mib, force: 3, err: "NVMAI_GPU_SLOTS=3"},
		{name: "forced past E", budget: 4096 * mib, force: 65, err: "NVMAI_GPU_SLOTS=65"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			in.Budget, in.ForceSlots = tc.budget, tc.force
			p, err := PlanExperts(in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Slots != tc.slots {
				t.Fatalf("%d slots a layer, want %d", p.Slots, tc.slots)
			}
			if p.Resident() != (tc.slots == 64) {
				t.Fatalf("resident %v with %d slots", p.Resident(), p.Slots)
			}
			if p.Resident() {
				if p.StagingBytes != 0 || p.SlotBytes != 0 || p.PinnedBytes != 0 {
					t.Fatalf("resident plan has streaming buffers: %+v", p)
				}
				return
			}
			if p.StagingBytes != 64*mib || p.SlotBytes != int64(tc.slots)*10*mib || p.PinnedBytes != 640*mib {
				t.Fatalf("streaming buffers %+v", p)
			}
			if tc.force == 0 && p.TrunkBytes+p.StateBytes+p.StagingBytes+p.SlotBytes > tc.budget {
				t.Fatalf("the plan takes %d bytes, past the budget %d", p.TrunkBytes+p.StateBytes+p.StagingBytes+p.SlotBytes, tc.budget)
			}
			want := 10 * 4 * (1 - float64(tc.slots)/64) * mib
			if p.UniformMissBytes != want {
				t.Fatalf("uniform miss bytes %v, want %v", p.UniformMissBytes, want)
			}
			p.setH2D(20e9)
			if p.PredictedTokS != 20e9/want {
				t.Fatalf("predicted %v tok/s", p.PredictedTokS)
			}
			if lines := p.Lines(); len(lines) != 2 || !strings.Contains(lines[0], "streamed") {
				t.Fatalf("plan lines %q", lines)
			}
		})
	}
}

// NVMAI_GPU_SLOTS is a positive count or unset.
func TestSlotsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{{"", 0, true}, {"24", 24, true}, {"0", 0, false}, {"-3", 0, false}, {"x", 0, false}} {
		n, err := slotsFromEnv(tc.v)
		if (err == nil) != tc.ok || n != tc.want {
			t.Errorf("%q: %d, %v", tc.v, n, err)
		}
	}
}

// The auto reserve is 5% of the device, at least 512 MiB.
func TestAutoReserve(t *testing.T) {
	for _, tc := range []struct {
		total uint64
		want  int64
	}{{8 << 30, 512 << 20}, {80 << 30, 4 << 30}, {16 << 30, 16 << 30 / 20}} {
		if got := autoReserve(tc.total); got != tc.want {
			t.Errorf("autoReserve(%d) = %d, want %d", tc.total, got, tc.want)
		}
	}
}

// geometry35B is Qwen3.5/3.6-35B-A3B's (every fourth layer full attention, the default).
func geometry35B() packexperts.Geometry {
	return packexperts.Geometry{
		VocabSize: 248320, HiddenSize: 2048, NumLayers: 40, RMSNormEps: 1e-6, HiddenAct: "silu",
		NumAttentionHeads: 16, NumKeyValueHeads: 2, HeadDim: 256, RopeTheta: 1e7, PartialRotaryFactor: 0.25,
		MaxPositionEmbeddings: 262144, LinearConvKernelDim: 4, LinearNumKeyHeads: 16,
		LinearNumValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128,
		NumExperts: 256, NumExpertsPerTok: 8, MoeIntermediateSize: 512, SharedExpertIntermediateSize: 512,
	}
}

// The plan counts one sequence's KV cache at the sessions' width, as the
// device stores it (allocKV): at 262,144 tokens the 35B-A3B's 10 attention
// layers take 10 GiB at 32 bits, 5 GiB at 16 and 2.66 GiB at 8 (values and
// int8 scales), plus half as much again while the last growth copies it.
func TestStateBytesCountsKVWidth(t *testing.T) {
	cfg, err := qwen35.ConfigFromGeometry(qwen35.ArchMoE, geometry35B())
	if err != nil {
		t.Fatal(err)
	}
	g := newGeometry(cfg)
	const ctx = 262144
	want := map[int]int64{32: 10 << 30, 16: 5 << 30, 8: 10 * ctx * 1088}
	at32 := stateBytes(cfg, g, DefaultChunk, ctx, 32)
	for _, bits := range []int{32, 16, 8} {
		kv := cfg.StateBytesAt(ctx, bits) - cfg.StateBytesAt(0, bits)
		if kv != want[bits] {
			t.Errorf("%d-bit KV at %d tokens: %d bytes, want %d", bits, ctx, kv, want[bits])
		}
		n := stateBytes(cfg, g, DefaultChunk, ctx, bits)
		if saved := at32 - n; saved != 3*(want[32]-want[bits])/2 {
			t.Errorf("%d-bit KV: the state is %d bytes smaller than at 32 bits, want the KV cache's %d and its growth copy's", bits, saved, 3*(want[32]-want[bits])/2)
		}
		t.Logf("35B-A3B at %d tokens, %d-bit KV: KV %.2f GiB (+%.2f GiB while growing); one sequence's device state %.2f GiB",
			ctx, bits, float64(kv)/(1<<30), float64(kv)/2/(1<<30), float64(n)/(1<<30))
	}
}
