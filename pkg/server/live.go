package server

import (
	"sync"
	"time"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// ExpertLayerStats are one layer's share of ExpertCacheStats' hits and
// misses.
type ExpertLayerStats struct {
	Hits, Misses int64
}

// ExpertLayerReporter is an ExpertCacheReporter that also reports each
// layer's hits and misses, taken in the same instant as the totals (so
// they sum to them).
type ExpertLayerReporter interface {
	ExpertCacheStatsByLayer() (stats ExpertCacheStats, layers []ExpertLayerStats, ok bool)
}

// Memory is what a loaded engine holds, in bytes, as its footprint line
// at start says: the resident weights, the expert slots, and the KV cache
// at the full context.
type Memory struct {
	Resident, ExpertSlots, KV int64
	Total                     int64 // the whole footprint (sequence state and scratch included)
	// Device is where the experts and KV live when not in host memory
	// ("" for the CPU engine).
	Device string
	// VRAM is the device's memory now and the engine's plan of it (nil on
	// the CPU engine).
	VRAM *model.DeviceMemory
}

// MemoryReporter is an Engine that can tell its memory footprint.
type MemoryReporter interface {
	Memory() (Memory, bool)
}

// LiveGeneration is the generation running now, or the last one to run.
type LiveGeneration struct {
	Running      bool
	Model        string
	PromptTokens int
	Tokens       int // generated so far (the end-of-sequence token counted once done)
	Streamed     int // tokens passed on (Tokens without the end-of-sequence token)
	Started      time.Time
	// FirstToken is when the first token came (zero before it).
	FirstToken time.Time
	Ended      time.Time // zero while running
	// ExpertBytes are the expert bytes moved since the first token, over
	// Streamed-1 decode steps: read from disk, or with PCIe copied from
	// pinned RAM into the GPU's slots (HasExpertBytes false: the engine
	// streams no experts). While running they are brought up to date when
	// Live reads the counters, not per token: the GPU's counters are a
	// device read.
	ExpertBytes    int64
	HasExpertBytes bool
	PCIe           bool
	// Set once it ended, from its Outcome by the request log's formulas:
	// the prompt tokens reused from the prompt cache, and the speeds.
	CachedTokens            int
	PrefillTokS, DecodeTokS float64

	bytesAtFirst int64
}

// liveState follows the generations for Live; changed is closed (and
// replaced) at each token, start and end, so that a watcher wakes per
// token without polling.
type liveState struct {
	mu      sync.Mutex
	gen     LiveGeneration
	seq     uint64 // generations begun
	changed chan struct{}
}

func (l *liveState) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// LiveChanged returns a channel closed at the next token, generation start
// or end, or LiveNotify.
func (s *Server) LiveChanged() <-chan struct{} {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if s.live.changed == nil {
		s.live.changed = make(chan struct{})
	}
	return s.live.changed
}

// LiveNotify wakes LiveChanged's watchers: the HTTP host calls it when it
// has counted a request, so a live view shows the totals /metrics has.
func (s *Server) LiveNotify() {
	s.live.mu.Lock()
	s.live.notifyLocked()
	s.live.mu.Unlock()
}

// Live is a snapshot for the live panel (GET /v1/live).
type Live struct {
	Activity
	Model      string          // the model in memory ("" when none)
	Generation *LiveGeneration // nil before the first generation
	Memory     *Memory         // nil when the engine does not report it
}

// Live reports the activity, the latest generation and the loaded
// engine's memory. It may be called from any goroutine.
func (s *Server) Live() Live {
	l := Live{Activity: s.Activity(), Model: s.Loaded()}
	s.live.mu.Lock()
	if s.live.seq > 0 {
		g := s.live.gen
		if g.Running && g.HasExpertBytes && l.HasExpert {
			g.ExpertBytes = max(l.Expert.BytesRead-g.bytesAtFirst, 0)
		}
		l.Generation = &g
	}
	s.live.mu.Unlock()
	s.mu.RLock()
	e := s.engine
	s.mu.RUnlock()
	if r, ok := e.(MemoryReporter); ok {
		if m, ok := r.Memory(); ok {
			l.Memory = &m
		}
	}
	return l
}

// liveBegin records that generation g of model starts and returns the
// onToken that counts its tokens before passing them on, and the end to
// call with its outcome.
func (j *Job) liveBegin(g Generation, onToken func(string) bool) (func(string) bool, func(Outcome)) {
	l := &j.s.live
	l.mu.Lock()
	l.seq++
	seq := l.seq
	l.gen = LiveGeneration{Running: true, Model: j.Model(), PromptTokens: len(g.Prompt), Started: j.s.cfg.Now()}
	l.notifyLocked()
	l.mu.Unlock()
	// The expert counters are read at the first token and at the end
	// only (Live reads them in between): on the GPU each read is a copy
	// from the device.
	readBytes := func() (ExpertCacheStats, bool) {
		if r, ok := j.e.(ExpertCacheReporter); ok {
			return r.ExpertCacheStats()
		}
		return ExpertCacheStats{}, false
	}
	first := true // onToken is called from one goroutine
	counted := func(text string) bool {
		var atFirst ExpertCacheStats
		hasBytes := false
		if first {
			atFirst, hasBytes = readBytes()
		}
		l.mu.Lock()
		if l.seq == seq {
			if first {
				l.gen.FirstToken, l.gen.bytesAtFirst = j.s.cfg.Now(), atFirst.BytesRead
				l.gen.HasExpertBytes, l.gen.PCIe = hasBytes, atFirst.PCIe
			}
			l.gen.Tokens++
			l.gen.Streamed++
			l.notifyLocked()
		}
		l.mu.Unlock()
		first = false
		return onToken(text)
	}
	end := func(out Outcome) {
		final, hasBytes := readBytes()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.seq != seq {
			return // a later generation (--parallel) is shown now
		}
		if hasBytes && l.gen.HasExpertBytes {
			l.gen.ExpertBytes = max(final.BytesRead-l.gen.bytesAtFirst, 0)
		}
		var r RequestLog
		r.Fill(Usage{PromptTokens: len(g.Prompt), CachedTokens: out.CachedTokens, CompletionTokens: out.CompletionTokens}, out, "")
		l.gen.Running, l.gen.Ended = false, j.s.cfg.Now()
		l.gen.Tokens, l.gen.CachedTokens = out.CompletionTokens, out.CachedTokens
		l.gen.PrefillTokS, l.gen.DecodeTokS = r.PrefillTokS, r.DecodeTokS
		l.notifyLocked()
	}
	return counted, end
}

// ExpertCacheStatsByLayer implements ExpertLayerReporter.
func (r *RuntimeEngine) ExpertCacheStatsByLayer() (ExpertCacheStats, []ExpertLayerStats, bool) {
	st, layers := r.e.ExpertStatsByLayer()
	if st.Mode == "" {
		return ExpertCacheStats{}, nil, false
	}
	out := make([]ExpertLayerStats, len(layers))
	for i, l := range layers {
		out[i] = ExpertLayerStats{Hits: l.Hits, Misses: l.Misses}
	}
	return expertCacheStats(st), out, true
}

// expertCacheStats is st as the server reports it: the GPU's VRAM slots
// count the bytes they copy over PCIe where the CPU cache counts those it
// reads from disk.
func expertCacheStats(st expertcache.Stats) ExpertCacheStats {
	return ExpertCacheStats{Hits: st.Hits, Misses: st.Misses, BytesRead: st.BytesRead, PCIe: st.Mode == model.ExpertModeGPUPinned}
}

// Memory implements MemoryReporter: the footprint the CLI prints at
// start, for the engine's slots, KV bits and context.
func (r *RuntimeEngine) Memory() (Memory, bool) {
	info := r.e.Info()
	f, err := runtime.ComputeFootprint(r.e.Install, runtime.FootprintOptions{
		Experts: runtime.ExpertOptions{Slots: r.e.ExpertStats().SlotsPerLayer}, Device: info.Device,
		KVBits: r.opt.KVBits, MaxContext: r.Info().Context, Threads: 1,
	})
	if err != nil {
		return Memory{}, false
	}
	m := Memory{Resident: f.Resident, ExpertSlots: f.ExpertSlots, KV: f.KV, Total: f.Total, Device: f.Device}
	if d, ok := r.e.DeviceMemory(); ok {
		m.VRAM = &d
	}
	return m, true
}

// MachineMemory is the machine's RAM and this process's resident set, in
// bytes (0 where /proc does not tell).
func MachineMemory() (ram, rss int64) {
	ram, _ = expertcache.MemTotal()
	rss, _ = expertcache.CurrentRSS()
	return ram, rss
}
