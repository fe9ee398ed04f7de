package httpapi

import (
	"net/http"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/sse"
)

// LivePath streams the live panel's snapshots as Server-Sent Events (one
// per token while generating); ?once=1, or LiveJSONPath, answers one
// snapshot as JSON. The fields are documented in docs/server.md ("Live
// numbers").
const (
	LivePath     = "/v1/live"
	LiveJSONPath = "/v1/live.json"
)

// liveMinGap bounds the events of one stream: a fast decode (the GPU's
// hundreds of tokens a second) gets an event per liveMinGap, a CPU decode
// one per token.
const liveMinGap = 50 * time.Millisecond

// liveHeartbeat is how often a stream sends a snapshot while nothing
// happens, so that the memory figures stay current.
const liveHeartbeat = 2 * time.Second

// LiveSnapshot is one event of /v1/live.
type LiveSnapshot struct {
	Time  time.Time `json:"time"`
	Model *string   `json:"model"` // the model in memory
	Queue struct {
		Waiting    int `json:"waiting"`
		Generating int `json:"generating"`
	} `json:"queue"`
	// Totals are /metrics' counters of the same names, read from the same
	// counters (nvmai_<name>_total).
	Totals LiveTotals `json:"totals"`
	// Generation is the running generation, or the last one (null before
	// the first).
	Generation *LiveGeneration `json:"generation"`
	// ExpertCache is null when the engine streams no experts.
	ExpertCache *LiveExpertCache `json:"expert_cache"`
	Memory      LiveMemory       `json:"memory"`
}

// LiveTotals are /metrics' counters.
type LiveTotals struct {
	PromptTokens            int64  `json:"prompt_tokens"`
	GeneratedTokens         int64  `json:"generated_tokens"`
	PromptCacheReusedTokens int64  `json:"prompt_cache_reused_tokens"`
	ExpertCacheHits         *int64 `json:"expert_cache_hits"`
	ExpertCacheMisses       *int64 `json:"expert_cache_misses"`
	ExpertBytesRead         *int64 `json:"expert_bytes_read"` // from disk (CPU engine)
	ExpertPCIeBytes         *int64 `json:"expert_pcie_bytes"` // over PCIe into VRAM slots (GPU engine, streamed)
}

// LiveGeneration is server.LiveGeneration on the wire.
type LiveGeneration struct {
	Running      bool     `json:"running"`
	Model        string   `json:"model"`
	PromptTokens int      `json:"prompt_tokens"`
	CachedTokens *int     `json:"cached_tokens"` // once ended
	Tokens       int      `json:"tokens"`
	ElapsedS     float64  `json:"elapsed_s"`
	TTFTS        *float64 `json:"ttft_s"`
	PrefillTokS  *float64 `json:"prefill_tok_s"` // once ended
	DecodeTokS   *float64 `json:"decode_tok_s"`
	// DiskBytesPerToken: expert bytes read from disk per generated token
	// since the first; PCIeBytesPerToken: over PCIe to the GPU. Null where
	// the engine does not stream experts that way.
	DiskBytesPerToken *float64 `json:"disk_bytes_per_token"`
	PCIeBytesPerToken *float64 `json:"pcie_bytes_per_token"`
}

// LiveExpertCache is the loaded engine's expert cache.
type LiveExpertCache struct {
	HitRate float64          `json:"hit_rate"`
	Layers  []LiveLayerCount `json:"layers"`
}

// LiveLayerCount is one layer's expert-cache hits and misses since load.
type LiveLayerCount struct {
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
}

// LiveMemory is the loaded engine's footprint against the machine.
type LiveMemory struct {
	Device          string `json:"device"` // "cpu", or the device holding experts and KV
	ResidentBytes   *int64 `json:"resident_bytes"`
	ExpertSlotBytes *int64 `json:"expert_slot_bytes"`
	KVBytes         *int64 `json:"kv_bytes"`
	FootprintBytes  *int64 `json:"footprint_bytes"`
	ProcessRSSBytes *int64 `json:"process_rss_bytes"`
	MachineRAMBytes *int64 `json:"machine_ram_bytes"`
	// The device's memory (null on the CPU engine): used (all processes)
	// and total now, and the engine's plan: the trunk (weights that are not
	// routed experts), one sequence's KV cache and state at the planned
	// context, the routed experts in VRAM (the slots when streamed, all of
	// them when resident) and prefill's staging buffer (0 when resident).
	VRAMUsedBytes       *int64 `json:"vram_used_bytes"`
	VRAMTotalBytes      *int64 `json:"vram_total_bytes"`
	VRAMTrunkBytes      *int64 `json:"vram_trunk_bytes"`
	VRAMStateBytes      *int64 `json:"vram_state_bytes"`
	VRAMExpertSlotBytes *int64 `json:"vram_expert_slot_bytes"`
	VRAMStagingBytes    *int64 `json:"vram_staging_bytes"`
	VRAMStreamed        *bool  `json:"vram_streamed"` // the experts stream into the slots from pinned RAM
}

func ptr[T any](v T) *T { return &v }

func positive(v int64) *int64 {
	if v <= 0 {
		return nil
	}
	return &v
}

// liveSnapshot reads the server's live state and the request counters.
func (h *Host) liveSnapshot() LiveSnapshot {
	l := h.s.Live()
	now := h.s.Now()
	var out LiveSnapshot
	out.Time = now.UTC()
	if l.Model != "" {
		out.Model = ptr(l.Model)
	}
	out.Queue.Waiting, out.Queue.Generating = l.Waiting, l.Generating
	m := &h.counts
	m.mu.Lock()
	out.Totals = LiveTotals{PromptTokens: m.promptTokens, GeneratedTokens: m.generated, PromptCacheReusedTokens: m.reusedToks}
	m.mu.Unlock()
	if l.HasExpert {
		out.Totals.ExpertCacheHits, out.Totals.ExpertCacheMisses = ptr(l.Expert.Hits), ptr(l.Expert.Misses)
		if l.Expert.PCIe {
			out.Totals.ExpertPCIeBytes = ptr(l.Expert.BytesRead)
		} else {
			out.Totals.ExpertBytesRead = ptr(l.Expert.BytesRead)
		}
		ec := &LiveExpertCache{Layers: make([]LiveLayerCount, len(l.ExpertLayers))}
		if n := l.Expert.Hits + l.Expert.Misses; n > 0 {
			ec.HitRate = float64(l.Expert.Hits) / float64(n)
		}
		for i, c := range l.ExpertLayers {
			ec.Layers[i] = LiveLayerCount{Hits: c.Hits, Misses: c.Misses}
		}
		out.ExpertCache = ec
	}
	if g := l.Generation; g != nil {
		out.Generation = liveGeneration(g, now)
	}
	out.Memory.Device = "cpu"
	if mem := l.Memory; mem != nil {
		if mem.Device != "" {
			out.Memory.Device = mem.Device
		}
		out.Memory.ResidentBytes, out.Memory.ExpertSlotBytes = ptr(mem.Resident), ptr(mem.ExpertSlots)
		out.Memory.KVBytes, out.Memory.FootprintBytes = ptr(mem.KV), ptr(mem.Total)
		if v := mem.VRAM; v != nil {
			m := &out.Memory
			m.VRAMUsedBytes, m.VRAMTotalBytes, m.VRAMTrunkBytes, m.VRAMStateBytes = ptr(v.Used), ptr(v.Total), ptr(v.Trunk), ptr(v.State)
			m.VRAMExpertSlotBytes, m.VRAMStagingBytes, m.VRAMStreamed = ptr(v.Experts), ptr(v.Staging), ptr(v.Streamed)
		}
	}
	ram, rss := server.MachineMemory()
	out.Memory.MachineRAMBytes, out.Memory.ProcessRSSBytes = positive(ram), positive(rss)
	return out
}

func liveGeneration(g *server.LiveGeneration, now time.Time) *LiveGeneration {
	end := now
	if !g.Running {
		end = g.Ended
	}
	lg := &LiveGeneration{Running: g.Running, Model: g.Model, PromptTokens: g.PromptTokens, Tokens: g.Tokens,
		ElapsedS: end.Sub(g.Started).Seconds()}
	if !g.FirstToken.IsZero() {
		lg.TTFTS = ptr(g.FirstToken.Sub(g.Started).Seconds())
		if g.HasExpertBytes && g.Streamed > 1 {
			perToken := ptr(float64(g.ExpertBytes) / float64(g.Streamed-1))
			if g.PCIe {
				lg.PCIeBytesPerToken = perToken
			} else {
				lg.DiskBytesPerToken = perToken
			}
		}
	}
	if g.Running {
		if s := end.Sub(g.FirstToken).Seconds(); !g.FirstToken.IsZero() && s > 0 && g.Streamed > 1 {
			lg.DecodeTokS = ptr(float64(g.Streamed-1) / s)
		}
		return lg
	}
	// Ended: the request log's figures, from the engine's own timings.
	lg.CachedTokens = ptr(g.CachedTokens)
	if g.PrefillTokS > 0 {
		lg.PrefillTokS = ptr(g.PrefillTokS)
	}
	if g.DecodeTokS > 0 {
		lg.DecodeTokS = ptr(g.DecodeTokS)
	}
	return lg
}

// live serves LivePath and LiveJSONPath.
func (h *Host) live(w http.ResponseWriter, r *http.Request, _ *server.RequestLog) error {
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == LiveJSONPath || r.URL.Query().Get("once") != "" || r.Method == http.MethodHead {
		return WriteJSON(w, http.StatusOK, h.liveSnapshot())
	}
	ctx := r.Context()
	st := sse.Start(w, r, 15*time.Second, sse.Comment)
	defer st.Close()
	heartbeat := time.NewTimer(0)
	defer heartbeat.Stop()
	for {
		changed := h.s.LiveChanged()
		st.Data(h.liveSnapshot())
		if err := st.Err(); err != nil {
			return err
		}
		heartbeat.Reset(liveHeartbeat)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-heartbeat.C:
		}
		select { // at most one event per liveMinGap
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(liveMinGap):
		}
	}
}
