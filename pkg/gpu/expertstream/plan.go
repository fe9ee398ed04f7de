package expertstream

import (
	"fmt"
	"strconv"

	"github.com/nvmai/nvmai/pkg/model"
)

// PlanInput is what decides where a model's routed experts live: the
// device-memory budget, the bytes that must be in device memory whatever
// it holds of the experts, and the experts' shape.
type PlanInput struct {
	Budget     int64 // device memory the model may take, trunk included
	TrunkBytes int64 // every weight but the routed experts
	// StateBytes is one sequence's device memory at PlanContext tokens: KV
	// cache (and the smaller one a growth copies from), recurrent and conv
	// state, a prefill pass's scratch and attention scores, sampling.
	StateBytes  int64
	PlanContext int
	KVBits      int   // the KV width StateBytes counts (reported)
	Stride      int64 // bytes of one expert record
	Layers      int   // MoE layers
	Experts     int   // E, experts per layer
	TopK        int
	// ForceSlots (NVMAI_GPU_SLOTS, tests and measurements) streams with
	// exactly that many slots per layer (TopK ≤ ForceSlots < Experts),
	// whatever the budget.
	ForceSlots int
}

// Plan is where the experts live: resident (Slots == Experts, every expert
// in device memory, the engine as it always ran) or streamed (Slots < E
// slots per layer in device memory, every expert in page-locked host RAM,
// a staging buffer of E records for prefill).
type Plan struct {
	Budget       int64 `json:"vram_budget_bytes"`
	BudgetAuto   bool  `json:"vram_budget_auto"`
	Reserve      int64 `json:"vram_reserve_bytes,omitempty"` // left free by auto
	TrunkBytes   int64 `json:"trunk_bytes"`
	StateBytes   int64 `json:"state_bytes"`
	PlanContext  int   `json:"plan_context_tokens"`
	KVBits       int   `json:"kv_bits,omitempty"` // the width the state's KV cache is counted at
	ExpertBytes  int64 `json:"expert_bytes"`      // every routed expert of every layer
	StagingBytes int64 `json:"staging_bytes"`     // streamed: E records
	SlotBytes    int64 `json:"vram_slot_bytes"`   // streamed: Slots·Stride·Layers
	PinnedBytes  int64 `json:"pinned_ram_bytes"`  // streamed: every expert
	Slots        int   `json:"slots_per_layer"`   // == Experts: resident
	Experts      int   `json:"experts_per_layer"`
	TopK         int   `json:"top_k"`
	Layers       int   `json:"moe_layers"`
	Stride       int64 `json:"expert_record_bytes"`
	Forced       bool  `json:"slots_forced,omitempty"` // NVMAI_GPU_SLOTS, whatever the budget
	// H2D is the host-to-device rate measured at load from pinned memory
	// (bytes/s, streamed only). UniformMissBytes is the bytes a decode step
	// copies when routing is uniform (each pick misses with 1 − S/E), and
	// PredictedTokS what the copies alone would allow at H2D.
	H2D              float64 `json:"h2d_bytes_per_s,omitempty"`
	UniformMissBytes float64 `json:"uniform_miss_bytes_per_token,omitempty"`
	PredictedTokS    float64 `json:"predicted_copy_bound_tok_s,omitempty"`
	// HostPlanned: page-locked RAM cannot hold every expert, so the host
	// plans each streamed layer's copies (host.go) from a RAM tier
	// of RAMSlots experts a layer (RAMBytes in all, sized as RAMWhy says,
	// page-locked when RAMLocked, else RAMNote says why not) read from
	// disk (DiskBytes: the experts the tier cannot hold) in RAMMode.
	HostPlanned bool   `json:"host_planned,omitempty"`
	RAMSlots    int    `json:"ram_slots_per_layer,omitempty"`
	RAMBytes    int64  `json:"ram_tier_bytes,omitempty"`
	RAMWhy      string `json:"ram_tier_sized_by,omitempty"`
	RAMLocked   bool   `json:"ram_tier_page_locked,omitempty"`
	RAMNote     string `json:"ram_tier_note,omitempty"`
	RAMMode     string `json:"ram_tier_io_mode,omitempty"`
	DiskBytes   int64  `json:"disk_only_bytes,omitempty"`
}

// Resident reports whether every expert is in device memory.
func (p Plan) Resident() bool { return p.Slots >= p.Experts }

// PlanExperts decides the slots per layer, or refuses with the numbers.
func PlanExperts(in PlanInput) (Plan, error) {
	p := Plan{Budget: in.Budget, TrunkBytes: in.TrunkBytes, StateBytes: in.StateBytes, PlanContext: in.PlanContext, KVBits: in.KVBits,
		Experts: in.Experts, TopK: in.TopK, Layers: in.Layers, Stride: in.Stride,
		ExpertBytes: int64(in.Layers) * int64(in.Experts) * in.Stride}
	if in.Experts < 1 || in.TopK < 1 || in.TopK > in.Experts || in.Layers < 0 || in.Stride <= 0 {
		return p, fmt.Errorf("gpu: plan: %d experts top-%d over %d layers of %d-byte records is not a MoE geometry", in.Experts, in.TopK, in.Layers, in.Stride)
	}
	if in.ForceSlots > 0 {
		if in.ForceSlots < in.TopK || in.ForceSlots > in.Experts {
			return p, fmt.Errorf("gpu: NVMAI_GPU_SLOTS=%d: want %d (top-k) to %d (the experts per layer)", in.ForceSlots, in.TopK, in.Experts)
		}
		p.Forced = true
		p.SetSlots(in.ForceSlots)
		return p, nil
	}
	fixed := in.TrunkBytes + in.StateBytes
	if fixed+p.ExpertBytes <= in.Budget || in.Layers == 0 {
		p.SetSlots(in.Experts)
		return p, nil
	}
	staging := int64(in.Experts) * in.Stride
	minSlots := min(3*in.TopK, in.Experts)
	minNeed := fixed + staging + int64(minSlots)*in.Stride*int64(in.Layers)
	if fixed+staging > in.Budget {
		return p, fmt.Errorf("gpu: a VRAM budget of %s cannot hold the trunk (%s of weights that are not routed experts), one sequence's state at %d tokens (%s) and the prefill staging buffer (%s); streaming needs at least %s (%d slots a layer); raise --vram-budget, lower --max-context, or run --engine cpu",
			GiB(in.Budget), GiB(in.TrunkBytes), in.PlanContext, GiB(in.StateBytes), GiB(staging), GiB(minNeed), minSlots)
	}
	slots := int((in.Budget - fixed - staging) / (in.Stride * int64(in.Layers)))
	if slots >= in.Experts { // the staging buffer tipped it: resident needs no staging
		p.SetSlots(in.Experts)
		return p, nil
	}
	if slots < 3*in.TopK {
		return p, fmt.Errorf("gpu: a VRAM budget of %s leaves %d expert slots a layer (%d layers of %s records, after the trunk %s, the state at %d tokens %s and the staging buffer %s); below 3·top-k = %d slots a layer an expert cache does not pay; give --vram-budget %s or more, or run --engine cpu",
			GiB(in.Budget), slots, in.Layers, MiB(in.Stride), GiB(in.TrunkBytes), in.PlanContext, GiB(in.StateBytes), GiB(staging), 3*in.TopK, GiB(minNeed))
	}
	p.SetSlots(slots)
	return p, nil
}

// SetSlots gives the plan s slots a layer and the buffers streaming them
// takes (none when s reaches the experts: resident).
func (p *Plan) SetSlots(s int) {
	p.Slots = s
	p.StagingBytes, p.SlotBytes, p.PinnedBytes = 0, 0, 0
	if s < p.Experts {
		p.StagingBytes = int64(p.Experts) * p.Stride
		p.SlotBytes = int64(s) * p.Stride * int64(p.Layers)
		p.PinnedBytes = p.ExpertBytes
	}
	p.UniformMissBytes = float64(p.Layers) * float64(p.TopK) * (1 - float64(s)/float64(p.Experts)) * float64(p.Stride)
}

// SetRAMTier makes a streamed plan host-planned with a RAM tier of slots
// experts a layer; nothing is page-locked until the tier's slabs are
// registered (OpenRAMTier).
func (p *Plan) SetRAMTier(slots int, why string) {
	p.HostPlanned, p.RAMSlots, p.RAMWhy = true, slots, why
	p.RAMBytes = int64(slots) * p.Stride * int64(p.Layers)
	p.DiskBytes = p.ExpertBytes - p.RAMBytes
	p.PinnedBytes = 0
}

// SetH2D records the measured host-to-device rate and what it predicts.
func (p *Plan) SetH2D(rate float64) {
	p.H2D = rate
	if rate > 0 && p.UniformMissBytes > 0 {
		p.PredictedTokS = rate / p.UniformMissBytes
	}
}

// Lines is the plan as printed at start (stderr).
func (p Plan) Lines() []string {
	budget := GiB(p.Budget)
	if p.BudgetAuto {
		budget += fmt.Sprintf(" (auto: free VRAM less a %s reserve)", GiB(p.Reserve))
	}
	if p.Resident() {
		return []string{fmt.Sprintf("gpu plan: resident: VRAM budget %s holds the trunk %s, the state at %d tokens%s %s and every expert %s (%d a layer × %d layers)",
			budget, GiB(p.TrunkBytes), p.PlanContext, p.kvWidth(), GiB(p.StateBytes), GiB(p.ExpertBytes), p.Experts, p.Layers)}
	}
	forced := ""
	if p.Forced {
		forced = " (NVMAI_GPU_SLOTS)"
	}
	if p.HostPlanned {
		locked := "page-locked"
		if !p.RAMLocked {
			locked = p.RAMNote
			if locked == "" {
				locked = "not page-locked yet"
			}
		}
		return []string{
			fmt.Sprintf("gpu plan: streamed, host-planned (RAM cannot page-lock every expert): VRAM budget %s = trunk %s + state at %d tokens%s %s + prefill staging %s + expert slots %s (%d of %d a layer%s × %d layers)",
				budget, GiB(p.TrunkBytes), p.PlanContext, p.kvWidth(), GiB(p.StateBytes), GiB(p.StagingBytes), GiB(p.SlotBytes), p.Slots, p.Experts, forced, p.Layers),
			fmt.Sprintf("gpu plan: RAM tier %s (%d of %d experts a layer, sized by %s; %s), the rest of the %s of experts read from disk (%s reads); no decode graph: after each layer's routing the host reads the picks back and copies the misses",
				GiB(p.RAMBytes), p.RAMSlots, p.Experts, p.RAMWhy, locked, GiB(p.ExpertBytes), p.RAMMode),
			fmt.Sprintf("gpu plan: host→device %.1f GB/s measured from the RAM tier; uniform routing would copy %s a token (each of %d picks × %d layers missing with 1−%d/%d), so the copies allow at most %.0f tok/s, before the disk",
				p.H2D/1e9, MiB(int64(p.UniformMissBytes)), p.TopK, p.Layers, p.Slots, p.Experts, p.PredictedTokS),
		}
	}
	return []string{
		fmt.Sprintf("gpu plan: streamed: VRAM budget %s = trunk %s + state at %d tokens%s %s + prefill staging %s + expert slots %s (%d of %d a layer%s × %d layers); pinned RAM %s (every expert)",
			budget, GiB(p.TrunkBytes), p.PlanContext, p.kvWidth(), GiB(p.StateBytes), GiB(p.StagingBytes), GiB(p.SlotBytes), p.Slots, p.Experts, forced, p.Layers, GiB(p.PinnedBytes)),
		fmt.Sprintf("gpu plan: host→device %.1f GB/s measured from pinned memory; uniform routing would copy %s a token (each of %d picks × %d layers missing with 1−%d/%d), so the copies allow at most %.0f tok/s",
			p.H2D/1e9, MiB(int64(p.UniformMissBytes)), p.TopK, p.Layers, p.Slots, p.Experts, p.PredictedTokS),
	}
}

// kvWidth names the KV width the state is counted at, when known.
func (p Plan) kvWidth() string {
	if p.KVBits == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d-bit KV)", p.KVBits)
}

// DefaultPlanContext is the context the plan reserves one sequence's
// state for when --max-context does not say: the default --kv-initial. The
// KV cache grows on demand past it, outside the plan (a growth that finds
// no room fails with "no room for a KV cache").
const DefaultPlanContext = 8192

// AutoReserve is the device memory auto leaves free: 5% of it, at least
// 512 MiB (the driver, the kernels' module, other processes' growth).
func AutoReserve(total uint64) int64 {
	return max(512<<20, int64(total/20))
}

// SlotsFromEnv reads NVMAI_GPU_SLOTS (0: the plan decides).
func SlotsFromEnv(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("gpu: NVMAI_GPU_SLOTS=%q: want a number of expert slots a layer", v)
	}
	return n, nil
}

// GiB and MiB print a byte count for the plan's lines and errors.
func GiB(n int64) string { return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30)) }
func MiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// DeviceMemoryOf is the live panel's device memory (model.DeviceMemory):
// the device's used and total memory, and the plan's split of the
// engine's share; a dense model has no plan, and its uploaded weights are
// all trunk.
func DeviceMemoryOf(p Plan, weightBytes int64, free, total uint64) model.DeviceMemory {
	d := model.DeviceMemory{Used: int64(total - min(free, total)), Total: int64(total), Trunk: p.TrunkBytes, State: p.StateBytes}
	switch {
	case p.Experts == 0:
		d.Trunk = weightBytes
	case p.Resident():
		d.Experts = p.ExpertBytes
	default:
		d.Experts, d.Staging, d.Streamed = p.SlotBytes, p.StagingBytes, true
	}
	return d
}
