package gpu

import (
	"fmt"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Host-planned streaming (docs/gpu.md, "Streaming experts into VRAM", the
// disk tier): when page-locked RAM cannot hold every expert, the experts
// live in three tiers. The VRAM slot pools are the device-planned path's
// (same pools, same gathered products), but their table is kept on the host
// (slotRef, the very LRU slot_resolve runs on the device). Behind them the
// RAM tier is the CPU engine's bounded expert cache (pkg/expertcache),
// sized by --ram-budget, its slabs page-locked with cuMemHostRegister when
// the driver allows it; behind that the disk, read by the cache's bounded
// (O_DIRECT) reader.
//
// A pass cannot be one captured graph any more: after each streamed
// layer's route the host reads the picks back (a stream sync), resolves
// them against the table, acquires each miss from the RAM tier (reading it
// from disk on a RAM miss), copies it into its VRAM slot and uploads the
// step's slots; the layer then runs the device-planned path's launches on
// the pool. A prefill pass reads the pass's picks back and stages each
// needed expert once, from its VRAM slot (device to device) or from the RAM
// tier, into the staging buffer by id, leaving the table as it was. RAM
// slots are released once the copies from them have completed: at the next
// stream sync, which every later host-planned step begins with. Same
// kernels on the same bytes: bitwise the resident engine.

// hostTier is a host-planned model's RAM tier and host-side slot tables.
type hostTier struct {
	cache   *expertcache.Cache
	slabs   [][]byte // page-locked (registered) slabs; nil when the copies are pageable
	layers  map[*streamLayer]*hostLayer
	slotBuf []byte // page-locked: each layer's k slot indices, uploaded asynchronously
	// pending are RAM-tier releases whose copies may still be in flight.
	pending []func()
	// Host time blocked: in the RAM tier's Acquire (disk reads) and in
	// stream syncs (reading picks back, prefill's copies).
	acquireSeconds, syncSeconds float64
}

// hostLayer is one streamed layer's host-side state.
type hostLayer struct {
	index      int // the decoder's layer index
	cacheLayer int // the expert cache's layer (the install's order)
	ref        *slotRef
	picks      []int32 // the picks read back ([T·k])
	slots      []int32 // the decode step's slots, a view of hostTier.slotBuf
	// Counters as gpukernels.SlotStatsWords lays them out (the first six:
	// decode hits, misses, bytes; prefill from VRAM, from RAM, bytes).
	words [gpukernels.SlotStatsWords]int64
}

// deviceOps is what the host plan asks of the device, in stream order:
// *cuda.Ctx, or a test's fake that defers every copy to the next sync as
// an asynchronous stream may.
type deviceOps interface {
	DtoH(dst []byte, src cuda.DevicePtr) error // waits for the stream first
	HtoDAsync(dst cuda.DevicePtr, src []byte) error
	DtoD(dst, src cuda.DevicePtr, n uint64) error
	Sync() error
}

// hostPlanned reports whether the model's experts stream host-planned.
func (m *Model) hostPlanned() bool { return m.stream != nil && m.stream.host != nil }

// ramTierInput is what decides the RAM tier of a streamed plan.
type ramTierInput struct {
	Budget  int64 // --ram-budget (0: not set)
	Avail   int64 // MemAvailable (0: unknown)
	Force   bool  // NVMAI_GPU_HOST_PLANNED=1: host-planned even when RAM holds every expert
	Experts *packexperts.Experts
	Pinned  int64 // every expert: what device-planned streaming page-locks
}

// ramTier is the RAM tier planRAMTier decided.
type ramTier struct {
	hostPlanned bool
	slots       int    // experts a layer the RAM tier holds
	budget      int64  // the budget the slots were bought with
	why         string // how the budget was chosen
}

// planRAMTier keeps device-planned streaming when page-locked RAM holds
// every expert (the budget, when set, and the memory available allow it);
// else the host plans, with a RAM tier of --ram-budget, or half the memory
// available when the flag is not set (or asks for more than there is). A
// tier below the expert cache's own minimum (top-k experts a layer) is
// refused with its numbers.
func planRAMTier(in ramTierInput) (ramTier, error) {
	fits := (in.Budget <= 0 || in.Budget >= in.Pinned) && (in.Avail <= 0 || in.Pinned <= in.Avail)
	if fits && !in.Force {
		return ramTier{}, nil
	}
	t := ramTier{hostPlanned: true, budget: in.Budget, why: "--ram-budget"}
	switch {
	case in.Budget > 0 && (in.Avail <= 0 || in.Budget <= in.Avail):
	case in.Avail > 0:
		t.budget, t.why = in.Avail/2, fmt.Sprintf("half the %s of RAM available", gib(in.Avail))
		if in.Budget > 0 {
			t.why = fmt.Sprintf("--ram-budget %s is more than the %s of RAM available: half of that", gib(in.Budget), gib(in.Avail))
		}
	default:
		t.budget, t.why = expertcache.DefaultBudgetBytes, "the expert cache's default (RAM available unknown)"
	}
	var err error
	t.slots, err = expertcache.SlotsPerLayer(&packexperts.Manifest{Experts: in.Experts}, expertcache.Options{Budget: max(t.budget, 1)})
	if err != nil {
		return t, fmt.Errorf("gpu: the experts that do not fit VRAM stream from a RAM tier (%s): %w; raise --ram-budget or free RAM, raise --vram-budget, or run --engine cpu", t.why, err)
	}
	return t, nil
}

// hostPlannedFromEnv reads NVMAI_GPU_HOST_PLANNED (1: plan on the host even
// when RAM holds every expert; a measurement knob).
func hostPlannedFromEnv() (bool, error) {
	switch v := os.Getenv("NVMAI_GPU_HOST_PLANNED"); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("gpu: NVMAI_GPU_HOST_PLANNED=%q: want 1 (host-planned streaming) or 0", v)
	}
}

// openRAMTier opens the RAM tier of a host-planned plan: the expert cache
// over the install's expert files, its slabs page-locked when the driver
// allows (else the copies run from pageable memory, and the plan says so),
// and the host-side slot tables. byLayer maps the decoder's layers to
// their files.
func (m *Model) openRAMTier(c *cuda.Ctx, p *Plan, dir string, ex *packexperts.Experts) error {
	x := m.stream
	mode, err := expertcache.BoundedIOFromEnv()
	if err != nil {
		return err
	}
	cache, err := expertcache.New(dir, &packexperts.Manifest{Experts: ex}, expertcache.Options{Slots: p.RAMSlots, IO: mode, Prefetch: -1, NoWarm: true})
	if err != nil {
		return fmt.Errorf("gpu: opening the RAM tier of the streamed experts: %w", err)
	}
	h := &hostTier{cache: cache, layers: map[*streamLayer]*hostLayer{}}
	x.host = h
	p.RAMMode = cache.IOMode().String()
	slabs := cache.Slabs()
	if os.Getenv("NVMAI_GPU_RAM_PAGEABLE") == "1" { // a test knob: the fallback's path
		p.RAMNote, slabs = "not page-locked (NVMAI_GPU_RAM_PAGEABLE=1): copies run from pageable memory", nil
	}
	for i, s := range slabs {
		if err := c.HostRegister(s); err != nil {
			for _, done := range slabs[:i] {
				c.HostUnregister(done)
			}
			p.RAMNote = fmt.Sprintf("not page-locked (%v): copies run from pageable memory, at most the link's pageable rate", err)
			slabs = nil
			break
		}
	}
	h.slabs = slabs
	p.RAMLocked = slabs != nil
	if p.RAMLocked {
		p.PinnedBytes = p.RAMBytes
	}
	k := m.geom.k
	buf, _, err := c.HostAlloc(uint64(4 * k * len(m.layers)))
	if err != nil {
		return fmt.Errorf("gpu: page-locking the host-planned slot lists: %w", err)
	}
	h.slotBuf = buf
	return nil
}

// addHostLayer gives streamed layer i (in the cache's layer cacheLayer) its
// host-side table.
func (h *hostTier) addHostLayer(sl *streamLayer, i, cacheLayer, E, S, k int) {
	slots := unsafeInt32s(h.slotBuf[4*k*i : 4*k*(i+1)])
	h.layers[sl] = &hostLayer{index: i, cacheLayer: cacheLayer, ref: newSlotRef(E, S), slots: slots}
}

// close unregisters the slabs and closes the cache.
func (h *hostTier) close(c *cuda.Ctx) {
	c.Sync()        // no copy may still read a slab
	h.pending = nil // the cache goes: nothing left to release
	for _, s := range h.slabs {
		c.HostUnregister(s)
	}
	h.slabs = nil
	if h.slotBuf != nil {
		c.HostFree(h.slotBuf)
		h.slotBuf = nil
	}
	if h.cache != nil {
		h.cache.Close()
		h.cache = nil
	}
}

// readPicks waits for the stream and reads n picks back from sel; every
// copy enqueued before has completed then, so the RAM slots they read are
// released.
func (h *hostTier) readPicks(c deviceOps, hl *hostLayer, sel cuda.DevicePtr, n int) error {
	hl.picks = slices.Grow(hl.picks[:0], n)[:n]
	t := time.Now()
	err := c.DtoH(cuda.Bytes(hl.picks), sel)
	h.syncSeconds += time.Since(t).Seconds()
	if err != nil {
		return err
	}
	h.releasePending()
	return nil
}

func (h *hostTier) releasePending() {
	for _, r := range h.pending {
		r()
	}
	h.pending = h.pending[:0]
}

// acquire takes ids of the layer from the RAM tier (reading misses from
// disk), timing the wait.
func (h *hostTier) acquire(hl *hostLayer, ids []int) ([][]byte, func(), error) {
	t := time.Now()
	recs, release, err := h.cache.AcquireRecords(hl.cacheLayer, ids)
	h.acquireSeconds += time.Since(t).Seconds()
	if err != nil {
		return nil, nil, fmt.Errorf("gpu: layer %d: %w", hl.index, err)
	}
	return recs, release, nil
}

// hostRoutedExperts is routedExperts for a host-planned layer (see the top
// of this file): a decode step's picks get VRAM slots, the misses copied
// in, and the products gather from the pool by slot; a prefill pass's
// experts are staged by id.
func (m *Model) hostRoutedExperts(l *gpukernels.Launcher, st *State, ly *layerW, T int, do func(error)) (gate, up, down *gpukernels.Mat, sel cuda.DevicePtr) {
	sl, h := ly.stream, m.stream.host
	hl := h.layers[sl]
	if T == 1 {
		do(m.hostDecode(l.C, st, sl, hl))
		return sl.gate, sl.up, sl.down, sl.slotSel
	}
	do(m.hostStage(l.C, st, sl, hl, T))
	return ly.eGate, ly.eUp, ly.eDown, st.s.sel
}

// hostDecode resolves a decode step's picks on the host and copies the
// misses into their slots.
func (m *Model) hostDecode(c deviceOps, st *State, sl *streamLayer, hl *hostLayer) error {
	h, x, k := m.stream.host, m.stream, m.geom.k
	if err := h.readPicks(c, hl, st.s.sel, k); err != nil {
		return err
	}
	for _, e := range hl.picks {
		if e < 0 || int(e) >= m.geom.E {
			return fmt.Errorf("gpu: layer %d: the router picked expert %d of %d", hl.index, e, m.geom.E)
		}
	}
	copy(hl.slots, hl.ref.resolve(hl.picks))
	fill := hl.ref.fill
	hl.words[wordDecodeHits] += int64(k - len(fill))
	if len(fill) > 0 {
		ids := make([]int, len(fill))
		for j, f := range fill {
			ids[j] = int(f[1])
		}
		recs, release, err := h.acquire(hl, ids)
		if err != nil {
			hl.ref.forget(fill)
			return err
		}
		h.pending = append(h.pending, release)
		for j, f := range fill {
			if err := c.HtoDAsync(sl.pool+cuda.DevicePtr(int64(f[0])*x.stride), recs[j]); err != nil {
				hl.ref.forget(fill[j:])
				return err
			}
			hl.words[wordDecodeMisses]++
			hl.words[wordDecodeBytes] += x.stride
		}
	}
	return c.HtoDAsync(sl.slotSel, cuda.Bytes(hl.slots))
}

// hostStage stages every expert a prefill pass routes to, once, by id:
// from its VRAM slot when it has one, else from the RAM tier, as many at a
// time as the tier holds a layer. The table is left as it was.
func (m *Model) hostStage(c deviceOps, st *State, sl *streamLayer, hl *hostLayer, T int) error {
	h, x, E := m.stream.host, m.stream, m.geom.E
	if err := h.readPicks(c, hl, st.s.sel, T*m.geom.k); err != nil {
		return err
	}
	need, err := neededExperts(hl.picks, E)
	if err != nil {
		return fmt.Errorf("gpu: layer %d: %w", hl.index, err)
	}
	rec := func(base cuda.DevicePtr, i int) cuda.DevicePtr { return base + cuda.DevicePtr(int64(i)*x.stride) }
	var fromRAM []int
	for _, e := range need {
		if s := hl.ref.slotOf[e]; s >= 0 {
			if err := c.DtoD(rec(x.staging, e), rec(sl.pool, int(s)), uint64(x.stride)); err != nil {
				return err
			}
			hl.words[wordPrefillFromVRAM]++
		} else {
			fromRAM = append(fromRAM, e)
		}
	}
	for _, batch := range batches(fromRAM, h.cache.MaxAcquire()) {
		recs, release, err := h.acquire(hl, batch)
		if err != nil {
			return err
		}
		h.pending = append(h.pending, release)
		for j, e := range batch {
			if err := c.HtoDAsync(rec(x.staging, e), recs[j]); err != nil {
				return err
			}
			hl.words[wordPrefillFromHost]++
			hl.words[wordPrefillBytes] += x.stride
		}
		if len(batch) == h.cache.MaxAcquire() { // the tier's layer is all held: free it for the next batch
			t := time.Now()
			err := c.Sync()
			h.syncSeconds += time.Since(t).Seconds()
			if err != nil {
				return err
			}
			h.releasePending()
		}
	}
	return nil
}

// neededExperts is the distinct experts of a pass's picks, ascending.
func neededExperts(picks []int32, E int) ([]int, error) {
	seen := make([]bool, E)
	var out []int
	for _, e := range picks {
		if e < 0 || int(e) >= E {
			return nil, fmt.Errorf("the router picked expert %d of %d", e, E)
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, int(e))
		}
	}
	slices.Sort(out)
	return out, nil
}

// batches cuts ids into runs of at most n.
func batches(ids []int, n int) [][]int {
	var out [][]int
	for n > 0 && len(ids) > 0 {
		out = append(out, ids[:min(n, len(ids))])
		ids = ids[min(n, len(ids)):]
	}
	return out
}

// forget empties the slots of copies that never happened (fill entries:
// slot, expert), so no later step takes them for hits.
func (r *slotRef) forget(fill [][2]int32) {
	for _, f := range fill {
		s, e := f[0], f[1]
		if r.expertOf[s] == e {
			r.expertOf[s], r.slotOf[e], r.lastUse[s] = -1, -1, 0
		}
	}
}

// HostTierStats are StreamStats' host-planned figures
// (expertstream.HostTierStats).
type HostTierStats = expertstream.HostTierStats

// unsafeInt32s views b (a multiple of 4 bytes, 4-aligned) as int32s.
func unsafeInt32s(b []byte) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// streamStats is StreamStats for a host-planned model: the host's
// counters and the RAM tier's.
func (h *hostTier) streamStats(layers int) StreamStats {
	s := StreamStats{HostTierStats: HostTierStats{HostPlanned: true}, Layers: make([][gpukernels.SlotStatsWords]int64, layers)}
	for _, hl := range h.layers {
		s.Layers[hl.index] = hl.words
		s.DecodeHits += hl.words[wordDecodeHits]
		s.DecodeMisses += hl.words[wordDecodeMisses]
		s.DecodeBytes += hl.words[wordDecodeBytes]
		s.PrefillFromVRAM += hl.words[wordPrefillFromVRAM]
		s.PrefillFromHost += hl.words[wordPrefillFromHost]
		s.PrefillBytes += hl.words[wordPrefillBytes]
	}
	if h.cache != nil {
		c := h.cache.Stats()
		s.RAMHits, s.RAMMisses, s.DiskBytes, s.DiskSeconds = c.Hits, c.Misses, c.BytesRead, c.ReadSeconds
	}
	s.AcquireSeconds, s.SyncSeconds = h.acquireSeconds, h.syncSeconds
	return s
}

// TierStats are a host-planned model's tiers over a run of decode steps,
// per token (BenchInfo.Tiers).
type TierStats struct {
	Tokens             int     `json:"tokens"`
	VRAMHitRate        float64 `json:"vram_hit_rate"`
	RAMHitRate         float64 `json:"ram_hit_rate"` // of the VRAM misses
	PCIeBytesPerToken  float64 `json:"pcie_bytes_per_token"`
	DiskBytesPerToken  float64 `json:"disk_bytes_per_token"`
	DiskWaitMsPerToken float64 `json:"disk_wait_ms_per_token"` // blocked in the RAM tier (disk reads)
	SyncMsPerToken     float64 `json:"sync_ms_per_token"`      // blocked reading picks back, copies
}

// tierStats is the tiers' figures between two reads of the counters over
// tokens decode steps.
func tierStats(before, after StreamStats, tokens int) *TierStats {
	t := &TierStats{Tokens: tokens}
	n := float64(max(tokens, 1))
	hits, misses := after.DecodeHits-before.DecodeHits, after.DecodeMisses-before.DecodeMisses
	if hits+misses > 0 {
		t.VRAMHitRate = float64(hits) / float64(hits+misses)
	}
	if rh, rm := after.RAMHits-before.RAMHits, after.RAMMisses-before.RAMMisses; rh+rm > 0 {
		t.RAMHitRate = float64(rh) / float64(rh+rm)
	}
	t.PCIeBytesPerToken = float64(after.DecodeBytes-before.DecodeBytes) / n
	t.DiskBytesPerToken = float64(after.DiskBytes-before.DiskBytes) / n
	t.DiskWaitMsPerToken = 1e3 * (after.AcquireSeconds - before.AcquireSeconds) / n
	t.SyncMsPerToken = 1e3 * (after.SyncSeconds - before.SyncSeconds) / n
	return t
}
