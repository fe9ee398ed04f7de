package expertstream

import (
	"fmt"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Host-planned streaming (docs/gpu.md, "Streaming experts into VRAM", the
// disk tier): when page-locked RAM cannot hold every expert, the experts
// live in three tiers. The VRAM slot pools are the device-planned path's
// (same pools, same gathered products), but their table is kept on the host
// (SlotRef, the very LRU slot_resolve runs on the device). Behind them the
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
//
// Both engines run it (pkg/gpu for qwen3.5, qwen38gpu for qwen4_exp):
// each engine's forward calls Decode or Stage at a streamed layer, on its
// own slot pools and staging buffer. Read-ahead is pkg/gpu's alone and is
// off when the host plans.

// HostTier is a host-planned model's RAM tier and host-side slot tables.
type HostTier struct {
	engine  string // names the engine in errors
	E, K    int    // experts a layer, top-k
	Stride  int64  // bytes of one expert record
	cache   *expertcache.Cache
	slabs   [][]byte           // page-locked (registered) slabs; nil when the copies are pageable
	layers  map[int]*HostLayer // by the decoder's layer index
	slotBuf []byte             // page-locked: each layer's k slot indices, uploaded asynchronously
	// pending are RAM-tier releases whose copies may still be in flight.
	pending []func()
	// Host time blocked: in the RAM tier's Acquire (disk reads) and in
	// stream syncs (reading picks back, prefill's copies).
	acquireSeconds, syncSeconds float64
}

// HostLayer is one streamed layer's host-side state.
type HostLayer struct {
	index      int // the decoder's layer index
	cacheLayer int // the expert cache's layer (the install's order)
	Ref        *SlotRef
	picks      []int32 // the picks read back ([T·k])
	slots      []int32 // the decode step's slots, a view of HostTier.slotBuf
	// Counters as gpukernels.SlotStatsWords lays them out (the first six:
	// decode hits, misses, bytes; prefill from VRAM, from RAM, bytes).
	Words [gpukernels.SlotStatsWords]int64
}

// DeviceOps is what the host plan asks of the device, in stream order:
// *cuda.Ctx, or a test's fake that defers every copy to the next sync as
// an asynchronous stream may.
type DeviceOps interface {
	DtoH(dst []byte, src cuda.DevicePtr) error // waits for the stream first
	HtoDAsync(dst cuda.DevicePtr, src []byte) error
	DtoD(dst, src cuda.DevicePtr, n uint64) error
	Sync() error
}

// RAMTierInput is what decides the RAM tier of a streamed plan.
type RAMTierInput struct {
	Budget  int64 // --ram-budget (0: not set)
	Avail   int64 // MemAvailable (0: unknown)
	Force   bool  // NVMAI_GPU_HOST_PLANNED=1: host-planned even when RAM holds every expert
	Experts *packexperts.Experts
	Pinned  int64 // every expert: what device-planned streaming page-locks
}

// RAMTier is the RAM tier PlanRAMTier decided.
type RAMTier struct {
	HostPlanned bool
	Slots       int    // experts a layer the RAM tier holds
	Budget      int64  // the budget the slots were bought with
	Why         string // how the budget was chosen
}

// PlanRAMTier keeps device-planned streaming when page-locked RAM holds
// every expert (the budget, when set, and the memory available allow it);
// else the host plans, with a RAM tier of --ram-budget, or half the memory
// available when the flag is not set (or asks for more than there is). A
// tier below the expert cache's own minimum (top-k experts a layer) is
// refused with its numbers.
func PlanRAMTier(in RAMTierInput) (RAMTier, error) {
	fits := (in.Budget <= 0 || in.Budget >= in.Pinned) && (in.Avail <= 0 || in.Pinned <= in.Avail)
	if fits && !in.Force {
		return RAMTier{}, nil
	}
	t := RAMTier{HostPlanned: true, Budget: in.Budget, Why: "--ram-budget"}
	switch {
	case in.Budget > 0 && (in.Avail <= 0 || in.Budget <= in.Avail):
	case in.Avail > 0:
		t.Budget, t.Why = in.Avail/2, fmt.Sprintf("half the %s of RAM available", GiB(in.Avail))
		if in.Budget > 0 {
			t.Why = fmt.Sprintf("--ram-budget %s is more than the %s of RAM available: half of that", GiB(in.Budget), GiB(in.Avail))
		}
	default:
		t.Budget, t.Why = expertcache.DefaultBudgetBytes, "the expert cache's default (RAM available unknown)"
	}
	var err error
	t.Slots, err = expertcache.SlotsPerLayer(&packexperts.Manifest{Experts: in.Experts}, expertcache.Options{Budget: max(t.Budget, 1)})
	if err != nil {
		return t, fmt.Errorf("gpu: the experts that do not fit VRAM stream from a RAM tier (%s): %w; raise --ram-budget or free RAM, raise --vram-budget, or run --engine cpu", t.Why, err)
	}
	return t, nil
}

// HostPlannedFromEnv reads NVMAI_GPU_HOST_PLANNED (1: plan on the host even
// when RAM holds every expert; a measurement knob).
func HostPlannedFromEnv() (bool, error) {
	switch v := os.Getenv("NVMAI_GPU_HOST_PLANNED"); v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("gpu: NVMAI_GPU_HOST_PLANNED=%q: want 1 (host-planned streaming) or 0", v)
	}
}

// OpenRAMTier opens the RAM tier of a host-planned plan: the expert cache
// over the install's expert files, its slabs page-locked when the driver
// allows (else the copies run from pageable memory, and the plan says so),
// and the page-locked slot lists of layers layers (AddLayer gives each
// streamed layer its table). engine names the engine in errors. On error
// the tier returned, when not nil, holds what was opened so far: the
// caller closes it, as after success.
func OpenRAMTier(c *cuda.Ctx, p *Plan, dir string, ex *packexperts.Experts, layers int, engine string) (*HostTier, error) {
	mode, err := expertcache.BoundedIOFromEnv()
	if err != nil {
		return nil, err
	}
	cache, err := expertcache.New(dir, &packexperts.Manifest{Experts: ex}, expertcache.Options{Slots: p.RAMSlots, IO: mode, Prefetch: -1, NoWarm: true})
	if err != nil {
		return nil, fmt.Errorf("%s: opening the RAM tier of the streamed experts: %w", engine, err)
	}
	h := &HostTier{engine: engine, E: p.Experts, K: p.TopK, Stride: ex.Stride, cache: cache, layers: map[int]*HostLayer{}}
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
	k := h.K
	buf, _, err := c.HostAlloc(uint64(4 * k * layers))
	if err != nil {
		return h, fmt.Errorf("%s: page-locking the host-planned slot lists: %w", engine, err)
	}
	h.slotBuf = buf
	return h, nil
}

// AddLayer gives streamed layer i (in the cache's layer cacheLayer) its
// host-side table of S VRAM slots.
func (h *HostTier) AddLayer(i, cacheLayer, S int) *HostLayer {
	k := h.K
	slots := unsafeInt32s(h.slotBuf[4*k*i : 4*k*(i+1)])
	hl := &HostLayer{index: i, cacheLayer: cacheLayer, Ref: NewSlotRef(h.E, S), slots: slots}
	h.layers[i] = hl
	return hl
}

// Layer is layer i's host-side state (nil: not streamed).
func (h *HostTier) Layer(i int) *HostLayer { return h.layers[i] }

// FirstSlab is the RAM tier's first slab, as the copies read it
// (H2DRate's source).
func (h *HostTier) FirstSlab() []byte { return h.cache.Slabs()[0] }

// Close unregisters the slabs and closes the cache.
func (h *HostTier) Close(c *cuda.Ctx) {
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
func (h *HostTier) readPicks(c DeviceOps, hl *HostLayer, sel cuda.DevicePtr, n int) error {
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

func (h *HostTier) releasePending() {
	for _, r := range h.pending {
		r()
	}
	h.pending = h.pending[:0]
}

// acquire takes ids of the layer from the RAM tier (reading misses from
// disk), timing the wait.
func (h *HostTier) acquire(hl *HostLayer, ids []int) ([][]byte, func(), error) {
	t := time.Now()
	recs, release, err := h.cache.AcquireRecords(hl.cacheLayer, ids)
	h.acquireSeconds += time.Since(t).Seconds()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: layer %d: %w", h.engine, hl.index, err)
	}
	return recs, release, nil
}

// Decode resolves a decode step's picks (the k at sel) on the host and
// copies the misses into their slots of pool; the step's slots go to
// slotSel, which the layer's products gather by.
func (h *HostTier) Decode(c DeviceOps, hl *HostLayer, sel, pool, slotSel cuda.DevicePtr) error {
	k := h.K
	if err := h.readPicks(c, hl, sel, k); err != nil {
		return err
	}
	for _, e := range hl.picks {
		if e < 0 || int(e) >= h.E {
			return fmt.Errorf("%s: layer %d: the router picked expert %d of %d", h.engine, hl.index, e, h.E)
		}
	}
	copy(hl.slots, hl.Ref.Resolve(hl.picks))
	fill := hl.Ref.Fill
	hl.Words[WordDecodeHits] += int64(k - len(fill))
	if len(fill) > 0 {
		ids := make([]int, len(fill))
		for j, f := range fill {
			ids[j] = int(f[1])
		}
		recs, release, err := h.acquire(hl, ids)
		if err != nil {
			hl.Ref.Forget(fill)
			return err
		}
		h.pending = append(h.pending, release)
		for j, f := range fill {
			if err := c.HtoDAsync(pool+cuda.DevicePtr(int64(f[0])*h.Stride), recs[j]); err != nil {
				hl.Ref.Forget(fill[j:])
				return err
			}
			hl.Words[WordDecodeMisses]++
			hl.Words[WordDecodeBytes] += h.Stride
		}
	}
	return c.HtoDAsync(slotSel, cuda.Bytes(hl.slots))
}

// Stage stages every expert a prefill pass of T tokens routes to (the
// T·k picks at sel), once, by id, into staging: from its VRAM slot of pool
// when it has one, else from the RAM tier, as many at a time as the tier
// holds a layer. The table is left as it was.
func (h *HostTier) Stage(c DeviceOps, hl *HostLayer, sel, pool, staging cuda.DevicePtr, T int) error {
	E := h.E
	if err := h.readPicks(c, hl, sel, T*h.K); err != nil {
		return err
	}
	need, err := neededExperts(hl.picks, E)
	if err != nil {
		return fmt.Errorf("%s: layer %d: %w", h.engine, hl.index, err)
	}
	rec := func(base cuda.DevicePtr, i int) cuda.DevicePtr { return base + cuda.DevicePtr(int64(i)*h.Stride) }
	var fromRAM []int
	for _, e := range need {
		if s := hl.Ref.SlotOf[e]; s >= 0 {
			if err := c.DtoD(rec(staging, e), rec(pool, int(s)), uint64(h.Stride)); err != nil {
				return err
			}
			hl.Words[WordPrefillFromVRAM]++
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
			if err := c.HtoDAsync(rec(staging, e), recs[j]); err != nil {
				return err
			}
			hl.Words[WordPrefillFromHost]++
			hl.Words[WordPrefillBytes] += h.Stride
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

// Forget empties the slots of copies that never happened (fill entries:
// slot, expert), so no later step takes them for hits.
func (r *SlotRef) Forget(fill [][2]int32) {
	for _, f := range fill {
		s, e := f[0], f[1]
		if r.ExpertOf[s] == e {
			r.ExpertOf[s], r.SlotOf[e], r.LastUse[s] = -1, -1, 0
		}
	}
}

// unsafeInt32s views b (a multiple of 4 bytes, 4-aligned) as int32s.
func unsafeInt32s(b []byte) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// StreamStats is StreamStats for a host-planned model of layers layers:
// the host's counters and the RAM tier's.
func (h *HostTier) StreamStats(layers int) StreamStats {
	s := StreamStats{HostTierStats: HostTierStats{HostPlanned: true}, Layers: make([][gpukernels.SlotStatsWords]int64, layers)}
	for _, hl := range h.layers {
		s.Layers[hl.index] = hl.Words
		s.DecodeHits += hl.Words[WordDecodeHits]
		s.DecodeMisses += hl.Words[WordDecodeMisses]
		s.DecodeBytes += hl.Words[WordDecodeBytes]
		s.PrefillFromVRAM += hl.Words[WordPrefillFromVRAM]
		s.PrefillFromHost += hl.Words[WordPrefillFromHost]
		s.PrefillBytes += hl.Words[WordPrefillBytes]
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

// TierStatsOf is the tiers' figures between two reads of the counters over
// tokens decode steps.
func TierStatsOf(before, after StreamStats, tokens int) *TierStats {
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
