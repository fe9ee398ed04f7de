package gpu

import (
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// The plan moved to expertstream (shared with qwen38gpu); these keep the
// engine's names, json fields and tests as they were.

// PlanInput is what decides where a model's routed experts live
// (expertstream.PlanInput).
type PlanInput = expertstream.PlanInput

// Plan is where the experts live (expertstream.Plan), with its methods.
type Plan expertstream.Plan

// Resident reports whether every expert is in device memory.
func (p Plan) Resident() bool { return expertstream.Plan(p).Resident() }

// Lines is the plan as printed at start (stderr).
func (p Plan) Lines() []string { return expertstream.Plan(p).Lines() }

func (p *Plan) setSlots(s int)                   { (*expertstream.Plan)(p).SetSlots(s) }
func (p *Plan) setRAMTier(slots int, why string) { (*expertstream.Plan)(p).SetRAMTier(slots, why) }
func (p *Plan) setH2D(rate float64)              { (*expertstream.Plan)(p).SetH2D(rate) }

// PlanExperts decides the slots per layer, or refuses with the numbers.
func PlanExperts(in PlanInput) (Plan, error) {
	p, err := expertstream.PlanExperts(in)
	return Plan(p), err
}

// DefaultPlanContext is the context the plan reserves one sequence's
// state for when --max-context does not say.
const DefaultPlanContext = expertstream.DefaultPlanContext

func autoReserve(total uint64) int64     { return expertstream.AutoReserve(total) }
func slotsFromEnv(v string) (int, error) { return expertstream.SlotsFromEnv(v) }
func gib(n int64) string                 { return expertstream.GiB(n) }
func mib(n int64) string                 { return expertstream.MiB(n) }

// stateBytes is one sequence's device memory at ctx tokens with prefill
// passes of chunk tokens and a KV cache of kvBits: State.alloc's buffers,
// the KV cache (values and int8 scales, as allocKV sizes them) and the one
// a growth copies from, the attention scores at that capacity, and the
// sampling buffers.
func stateBytes(cfg qwen35.Config, g geometry, chunk, ctx, kvBits int) int64 {
	T := int64(chunk)
	f := func(n int) int64 { return 4 * T * int64(max(n, 1)) }
	n := cfg.StateBytesAt(ctx, kvBits) // KV and recurrent state
	kvLayers := int64(0)
	for _, kind := range cfg.Layers {
		if kind == qwen35.FullAttention {
			kvLayers++
		}
	}
	values, scales := gpukernels.KVRowBytes(kvBits, g.kvd, g.attn.Dh)
	kv := kvLayers * 2 * (values + scales) * int64(min(ctx, cfg.MaxContext))
	n += kv / 2 // the previous capacity, held while a growth copies it
	n += 2*f(g.H) + 2*f(g.C) + f(g.vd) + f(max(g.vd, g.attn.Hq*g.attn.Dh)) + f(2*g.gdn.Hv) + f(g.gdn.Hv)
	n += f(2*g.attn.Hq*g.attn.Dh) + 2*f(g.kvd) + f(g.E+1) + 2*f(g.k) + 2*f(g.Is) + f(1)
	n += 2*f(g.k*g.I) + f(g.k*g.H) + f(g.H) + 2*f(g.Inter) + f(g.k) + f(g.vd)
	n += 4*int64(g.E+1) + 4*int64(g.H) + 4*int64(g.V) + 4*(4+2*MaxCandidates)
	widest := max(g.H, g.vd, g.attn.Hq*g.attn.Dh, g.Is, g.Inter, g.k*g.I)
	groups := T * int64(widest/64)
	n += groups * (64 + 64 + 8)
	n += 4 * T * int64(max(g.attn.Hq, 1)) * int64(min(ctx, cfg.MaxContext)) // attention scores
	n += 24*int64(g.V) + 8*int64(g.V/512+1) + 16 + 4*devshared.SampUpload   // sampling
	return n
}
