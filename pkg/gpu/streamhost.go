package gpu

import (
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
)

// Host-planned streaming (docs/gpu.md, "Streaming experts into VRAM", the
// disk tier): the RAM tier, the host-side slot tables, the decode step's
// resolve on the host and prefill's staging from the RAM tier are
// expertstream's (host.go), shared with qwen38gpu; pkg/gpu keeps its
// forward's hook, which calls them on its own slot pools and staging
// buffer.

// hostPlanned reports whether the model's experts stream host-planned.
func (m *Model) hostPlanned() bool { return m.stream != nil && m.stream.host != nil }

// hostRoutedExperts is routedExperts for a host-planned layer (see
// expertstream's host.go): a decode step's picks get VRAM slots, the
// misses copied in, and the products gather from the pool by slot; a
// prefill pass's experts are staged by id.
func (m *Model) hostRoutedExperts(l *gpukernels.Launcher, st *State, ly *layerW, T int, do func(error)) (gate, up, down *gpukernels.Mat, sel cuda.DevicePtr) {
	sl, h := ly.stream, m.stream.host
	hl := h.Layer(sl.layer)
	if T == 1 {
		do(h.Decode(l.C, hl, st.s.sel, sl.pool, sl.slotSel))
		return sl.gate, sl.up, sl.down, sl.slotSel
	}
	do(h.Stage(l.C, hl, st.s.sel, sl.pool, m.stream.staging, T))
	return ly.eGate, ly.eUp, ly.eDown, st.s.sel
}

// HostTierStats are StreamStats' host-planned figures
// (expertstream.HostTierStats).
type HostTierStats = expertstream.HostTierStats

// TierStats are a host-planned model's tiers over a run of decode steps,
// per token (BenchInfo.Tiers; expertstream.TierStats).
type TierStats = expertstream.TierStats

// tierStats is the tiers' figures between two reads of the counters over
// tokens decode steps.
func tierStats(before, after StreamStats, tokens int) *TierStats {
	return expertstream.TierStatsOf(before, after, tokens)
}
