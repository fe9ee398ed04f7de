package gpu

import (
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/model"
)

// The live panel's figures (serve's /v1/live): read on demand, one device
// read each, never per step.

// The words of a layer's slot counters (gpukernels.SlotStatsWords) that
// StreamStats sums: decode hits, misses and bytes; prefill's experts
// staged from a slot, from host RAM, and the bytes; read-ahead's guesses,
// picks guessed, copies, copies used and bytes.
const (
	wordDecodeHits      = expertstream.WordDecodeHits
	wordDecodeMisses    = expertstream.WordDecodeMisses
	wordDecodeBytes     = expertstream.WordDecodeBytes
	wordPrefillFromVRAM = expertstream.WordPrefillFromVRAM
	wordPrefillFromHost = expertstream.WordPrefillFromHost
	wordPrefillBytes    = expertstream.WordPrefillBytes
)

// expertStatsOf is s as the CPU expert cache reports its counters (see
// ExpertStats).
func (b *Backend) expertStatsOf(s StreamStats) expertcache.Stats {
	p := b.Model.plan
	width := 0
	if b.Model.stream.readAhead {
		width = b.Model.geom.k
	}
	st := expertcache.Stats{Hits: s.DecodeHits + s.PrefillFromVRAM, Misses: s.DecodeMisses + s.PrefillFromHost,
		BytesRead: s.DecodeBytes + s.PrefillBytes + s.AheadBytes, Prefetched: s.AheadCopies, PrefetchHits: s.AheadUsed, PrefetchBytes: s.AheadBytes,
		PrefetchWidth: width, Mode: model.ExpertModeGPUPinned, Policy: "lru", SlotsPerLayer: p.Slots, BudgetBytes: p.SlotBytes}
	if s.HostPlanned { // the disk tier: reads in flight, and the host blocked on them and on syncs
		st.ReadSeconds, st.WaitSeconds = s.DiskSeconds, s.AcquireSeconds+s.SyncSeconds
	}
	return st
}

// layerStatsOf is each layer's hits and misses as ExpertStats counts them
// (decode picks and prefill's staged experts), so they sum to its totals.
func layerStatsOf(s StreamStats) []expertcache.LayerStats {
	out := make([]expertcache.LayerStats, len(s.Layers))
	for i, l := range s.Layers {
		out[i] = expertcache.LayerStats{Hits: l[wordDecodeHits] + l[wordPrefillFromVRAM], Misses: l[wordDecodeMisses] + l[wordPrefillFromHost]}
	}
	return out
}

// ExpertStatsByLayer is ExpertStats and each layer's hits and misses, from
// one read of the counters (runtime.Engine.ExpertStatsByLayer, the live
// panel's heat strip). Zero and nil when the experts are resident.
func (b *Backend) ExpertStatsByLayer() (expertcache.Stats, []expertcache.LayerStats) {
	s, ok, err := b.Model.StreamStats()
	if !ok || err != nil {
		return expertcache.Stats{}, nil
	}
	return b.expertStatsOf(s), layerStatsOf(s)
}

// DeviceMemory implements model.DeviceMemoryReporter: the device's used and
// total memory now (cuMemGetInfo) and the plan's split of the engine's
// share.
func (b *Backend) DeviceMemory() (model.DeviceMemory, error) {
	var free, total uint64
	if err := b.Dev.Do(func(c *cuda.Ctx) (err error) { free, total, err = c.MemInfo(); return err }); err != nil {
		return model.DeviceMemory{}, err
	}
	return deviceMemoryOf(b.Model.plan, b.Model.WeightBytes, free, total), nil
}

// deviceMemoryOf splits the plan (expertstream.DeviceMemoryOf).
func deviceMemoryOf(p Plan, weightBytes int64, free, total uint64) model.DeviceMemory {
	return expertstream.DeviceMemoryOf(expertstream.Plan(p), weightBytes, free, total)
}
