package qwen38gpu

import (
	"cmp"
	"fmt"
	"os"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Streamed experts, as pkg/gpu streams the qwen3.5 ones (docs/gpu.md,
// "Streaming experts into VRAM"; the machinery is expertstream's): when
// the plan gives each MoE layer S < E slots, every expert sits in
// page-locked host memory mapped into the device and S of them in a VRAM
// slot pool; a decode step resolves its picks to slots and copies the
// misses inside its graph, a prefill pass stages the experts it needs by
// id. The products are the resident kernels on the same bytes, so the
// logits are bitwise the resident engine's.
//
// When page-locked RAM cannot hold every expert (--ram-budget below them,
// or less RAM available; NVMAI_GPU_HOST_PLANNED=1 forces it), the plan is
// host-planned, as pkg/gpu's: the disk tier, expertstream's host.go. The
// experts live in a RAM tier over pkg/expertcache (sized by --ram-budget,
// its slabs page-locked when the driver allows) backed by the disk; a
// decode step runs without its graph, the host reading each layer's picks
// back, resolving them against the host's slot table and copying the
// misses from the RAM tier; a prefill pass stages its experts from their
// VRAM slots or the RAM tier. Same kernels on the same bytes: bitwise the
// resident engine.
//
// Not here: pkg/gpu's read-ahead, which stays 35B-A3B only (its guess runs
// the router on an earlier layer's hidden state; qwen4_exp's router input
// is the gated residual's read, which the guess would have to repeat).

// planExperts sizes the experts' place from the options and the device
// memory free when Load began (the trunk is uploaded by now).
func (m *Model) planExperts(ex *packexperts.Experts) (expertstream.Plan, error) {
	cfg, g := m.cfg, m.g
	budget, reserve := m.opt.VRAMBudget, int64(0)
	auto := budget <= 0
	if auto {
		reserve = expertstream.AutoReserve(m.total0)
		budget = int64(m.free0) - reserve
	} else if budget > int64(m.free0) {
		return expertstream.Plan{}, fmt.Errorf("qwen38gpu: --vram-budget %s is more than the %s of VRAM free on %s; lower it, or use auto", expertstream.GiB(budget), expertstream.GiB(int64(m.free0)), m.dev.Name)
	}
	ctx := m.opt.MaxContext
	if ctx <= 0 {
		ctx = expertstream.DefaultPlanContext
	}
	ctx = min(ctx, cfg.MaxContext)
	force, err := expertstream.SlotsFromEnv(os.Getenv("NVMAI_GPU_SLOTS"))
	if err != nil {
		return expertstream.Plan{}, err
	}
	if m.opt.Slots > 0 {
		force = m.opt.Slots
	}
	bits := m.kvBits()
	p, err := expertstream.PlanExperts(expertstream.PlanInput{Budget: budget, TrunkBytes: m.WeightBytes, StateBytes: stateBytes(cfg, g, m.chunk, ctx, bits),
		PlanContext: ctx, KVBits: bits, Stride: ex.Stride, Layers: len(m.layers), Experts: g.E, TopK: g.k, ForceSlots: force})
	p.BudgetAuto, p.Reserve = auto, reserve
	if err != nil || p.Resident() {
		return p, err
	}
	// RAM that cannot page-lock every expert puts the host in charge of
	// the copies, from a RAM tier backed by the disk (expertstream's
	// host.go), as in pkg/gpu.
	forceHost, err := expertstream.HostPlannedFromEnv()
	if err != nil {
		return p, err
	}
	avail, _ := expertstream.MemAvailable()
	t, err := expertstream.PlanRAMTier(expertstream.RAMTierInput{Budget: m.opt.RAMBudget, Avail: avail, Force: forceHost, Experts: ex, Pinned: p.PinnedBytes})
	if err != nil {
		return p, err
	}
	if t.HostPlanned {
		p.SetRAMTier(t.Slots, t.Why)
	} else if p.Slots > gpukernels.MaxSlots {
		return p, fmt.Errorf("qwen38gpu: the plan gives %d expert slots a layer, past the kernels' %d; raise --vram-budget so every expert fits, or run --engine cpu", p.Slots, gpukernels.MaxSlots)
	}
	return p, nil
}

// hostPlanned reports whether the host plans the streamed layers' copies
// (no decode graph).
func (m *Model) hostPlanned() bool { return m.stream.HostPlanned() }

// kvBits is the KV width the plan counts: the sessions' default unless
// the options say.
func (m *Model) kvBits() int { return cmp.Or(m.opt.KVBits, model.DefaultKVBits) }

// stateBytes is one sequence's device memory at ctx tokens with prefill
// passes of chunk tokens and a KV cache of kvBits: State.alloc's scratch,
// the KV cache and indexer keys (and the smaller ones a growth copies
// from), the recurrent, conv and PLE state, the scores at that capacity,
// and sampling.
func stateBytes(cfg qwen38.Config, g geometry, chunk, ctx, kvBits int) int64 {
	T := int64(chunk)
	f := func(n int) int64 { return 4 * T * int64(max(n, 1)) }
	ctx = min(ctx, cfg.MaxContext)
	kv := cfg.KVBytes(ctx, kvBits)
	n := kv + kv/2 + cfg.FixedStateBytes()
	n += int64(len(cfg.PLELayers)) * f(g.Dp)
	n += 3*f(g.SH) + f(g.r) + f(g.S) + 2*f(g.H)
	if len(cfg.PLELayers) > 0 {
		n += 4*f(g.SH) + f(g.H)
	}
	n += 2*f(g.C) + f(g.vd) + 2*f(g.gdn.Hv) + f(max(g.vd, g.attn.Hq*g.attn.Dh)) + f(g.vd)
	n += f(2*g.attn.Hq*g.attn.Dh) + 2*f(g.kvd) + f((g.idx.Heads+1)*g.idx.Dim)
	n += f(g.E) + 2*f(g.k) + f(1) + 2*f(g.Is) + f(g.H) + 2*f(g.k*g.I) + f(g.k*g.H)
	n += 4*int64(g.H) + 4*int64(g.V) + 4*(4+2*MaxCandidates) + 12
	q8, q4, ds := gpukernels.QActBytes(chunk, max(g.H, g.SH, g.r, g.Dp, g.vd, g.attn.Hq*g.attn.Dh, g.Is, g.k*g.I)+64)
	n += q8 + q4 + 2*ds
	nb := int64(max(ctx/max(g.idx.Block, 1), 1))
	n += 4*T*int64(max(g.attn.Hq, 1))*int64(ctx) + 5*T*nb                 // attention and indexer scores, keep
	n += 24*int64(g.V) + 8*int64(g.V/512+1) + 16 + 4*devshared.SampUpload // sampling
	return n
}

// streamExperts sets up the streamed experts the plan gives S < E slots a
// layer (every qwen4_exp layer is a MoE layer) and times the link.
func (m *Model) streamExperts(c *cuda.Ctx, dir string, ex *packexperts.Experts) error {
	x, err := devshared.ExpertLayout("qwen38gpu", ex, m.g.E, m.g.k)
	if err != nil {
		return err
	}
	moe := make([]bool, len(m.layers))
	for i := range moe {
		moe[i] = true
	}
	alloc := func(n int64) (cuda.DevicePtr, error) {
		p, err := c.Alloc(uint64(n))
		if err == nil {
			m.allocs = append(m.allocs, p)
		}
		return p, err
	}
	m.stream, err = expertstream.Open(c, &m.plan, dir, ex, x, moe, "qwen38gpu", alloc)
	if err != nil {
		return err
	}
	for i := range m.layers {
		m.layers[i].stream = m.stream.Layers[i]
	}
	m.WeightBytes += m.plan.SlotBytes
	rate, err := expertstream.H2DRate(c, m.stream.Staging, m.stream.FirstHost())
	if err != nil {
		return err
	}
	m.plan.SetH2D(rate)
	return nil
}

// routedExperts enqueues what layer ly's expert products need after the
// route wrote s.sel, and returns the matrices and the selection they
// gather by: the resident buffers and s.sel, or for a streamed layer the
// pool and the decode step's slots (T == 1), or the staging buffer and
// s.sel (prefill).
func (f *forward) routedExperts(ly *layerW) (gate, up, down *gpukernels.Mat, sel cuda.DevicePtr) {
	s, sl, x := &f.st.s, ly.stream, f.st.m.stream
	if sl == nil {
		return ly.eGate, ly.eUp, ly.eDown, s.sel
	}
	if f.T == 1 {
		f.do(x.Decode(f.l, sl, s.sel))
		return sl.Pooled[0], sl.Pooled[1], sl.Pooled[2], sl.SlotSel
	}
	f.do(x.Stage(f.l, sl, s.sel, f.T*f.st.m.g.k))
	return sl.Staged[0], sl.Staged[1], sl.Staged[2], s.sel
}

// Plan is where the experts live, as Load decided it.
func (m *Model) Plan() expertstream.Plan { return m.plan }

// StreamStats reads the streamed experts' counters; ok is false when the
// experts are resident.
func (m *Model) StreamStats() (s expertstream.StreamStats, ok bool, err error) {
	if m.stream == nil {
		return s, false, nil
	}
	err = m.dev.Do(func(c *cuda.Ctx) error { s, err = m.stream.ReadStats(c); return err })
	return s, true, err
}

// StreamsExperts reports whether the experts stream into VRAM slots (the
// bench then reports the slot cache's figures).
func (b *Backend) StreamsExperts() bool { return b.Model.stream != nil }

// ExpertStats is the streamed experts' counters as the CPU expert cache
// reports its own (runtime.Engine.ExpertStats, the bench): a hit is an
// expert found in a VRAM slot (decode picks and prefill's staged experts),
// a miss one copied from pinned RAM, BytesRead the bytes copied over the
// bus. Host-planned (the disk tier), ReadSeconds is the disk reads' time
// in flight and WaitSeconds the host's time blocked on them and on stream
// syncs (StreamStats has the RAM tier's hits and misses and the disk
// bytes), as pkg/gpu reports them. Zero when the experts are resident.
func (b *Backend) ExpertStats() expertcache.Stats {
	st, _ := b.ExpertStatsByLayer()
	return st
}

// ExpertStatsByLayer is ExpertStats and each layer's hits and misses, from
// one read of the counters (the live panel's heat strip).
func (b *Backend) ExpertStatsByLayer() (expertcache.Stats, []expertcache.LayerStats) {
	s, ok, err := b.Model.StreamStats()
	if !ok || err != nil {
		return expertcache.Stats{}, nil
	}
	p := b.Model.plan
	st := expertcache.Stats{Hits: s.DecodeHits + s.PrefillFromVRAM, Misses: s.DecodeMisses + s.PrefillFromHost,
		BytesRead: s.DecodeBytes + s.PrefillBytes, Mode: model.ExpertModeGPUPinned, Policy: "lru", SlotsPerLayer: p.Slots, BudgetBytes: p.SlotBytes}
	if s.HostPlanned { // the disk tier: reads in flight, and the host blocked on them and on syncs
		st.ReadSeconds, st.WaitSeconds = s.DiskSeconds, s.AcquireSeconds+s.SyncSeconds
	}
	layers := make([]expertcache.LayerStats, len(s.Layers))
	for i, l := range s.Layers {
		layers[i] = expertcache.LayerStats{Hits: l[expertstream.WordDecodeHits] + l[expertstream.WordPrefillFromVRAM],
			Misses: l[expertstream.WordDecodeMisses] + l[expertstream.WordPrefillFromHost]}
	}
	return st, layers
}

// DeviceMemory implements model.DeviceMemoryReporter: the device's used
// and total memory now and the plan's split of the engine's share (the
// live panel).
func (b *Backend) DeviceMemory() (model.DeviceMemory, error) {
	var free, total uint64
	if err := b.Dev.Do(func(c *cuda.Ctx) (err error) { free, total, err = c.MemInfo(); return err }); err != nil {
		return model.DeviceMemory{}, err
	}
	return expertstream.DeviceMemoryOf(b.Model.plan, b.Model.WeightBytes, free, total), nil
}

// BenchInfo is the GPU section of nvmai-run bench's report for qwen4_exp:
// the device and where the experts live.
type BenchInfo struct {
	Device    string             `json:"device"`
	Plan      *expertstream.Plan `json:"plan,omitempty"`
	PlanLines []string           `json:"plan_lines,omitempty"`
}

// BenchInfo implements the bench's optional GPU section.
func (b *Backend) BenchInfo() any {
	p := b.Model.plan
	return &BenchInfo{Device: b.Dev.Name, Plan: &p, PlanLines: p.Lines()}
}

// Summary is BenchInfo as lines of nvmai-run bench's text report.
func (info *BenchInfo) Summary() []string { return info.PlanLines }
