package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Streamed experts (docs/gpu.md, "Streaming experts into VRAM"): the
// device-planned mechanism (slot pools over page-locked experts, decode's
// slot_resolve and slot_fill inside the graph, prefill's staging; bitwise
// the resident engine) is expertstream's, described in its stream.go;
// pkg/gpu adds the read-ahead (streamahead.go) and hooks the host-planned
// RAM tier, expertstream's host.go, into its forward (streamhost.go).
//
// Read-ahead (NVMAI_GPU_READAHEAD, on unless 0): a decode step guesses a
// streamed layer's picks from the hidden state entering the layer
// NVMAI_GPU_READAHEAD_DIST layers earlier (default 0: entering the layer
// itself, as validated; 1 or more opt in to the cross-layer read-ahead) — the layer's router on it, normed as the layer will norm
// its router input: the CPU engine's prefetchNext — gives the guesses
// slots (slot_prefetch) and copies those not in VRAM (slot_fill_ahead),
// all but the norm on the side stream, forked from the decode stream with
// an event, so the guess and its copies run beside the layers between;
// the stream waits for that layer's part of the side stream right before
// the layer's slot_resolve, which finds the right guesses as hits and
// copies only the rest (streamahead.go). The guesses touch only their own
// buffers and the slot tables, never the numbers.

// streamLayer is one streamed MoE layer.
type streamLayer struct {
	host           []byte         // every expert, page-locked: expert e at e·Stride
	hostDev        cuda.DevicePtr // host as the device reads it
	pool           cuda.DevicePtr // S slots of Stride bytes
	tab            cuda.DevicePtr // slot_resolve's table (gpukernels.SlotTableWords)
	stats          cuda.DevicePtr // gpukernels.SlotStatsWords counters
	slotSel        cuda.DevicePtr // [k] a decode step's slots, router order
	layer          int            // the decoder's index
	gate, up, down *gpukernels.Mat
}

// streamer is a model's streamed experts.
type streamer struct {
	slots   int
	stride  int64
	staging cuda.DevicePtr // E records: a prefill pass's experts by id
	need    cuda.DevicePtr // [E] int32: the experts a prefill pass routes to
	stats   cuda.DevicePtr // every layer's counters, layer after layer
	layers  []*streamLayer // by layer index
	// readAhead guesses each streamed layer's picks aheadDist layers
	// early and copies them beside the layers between (streamahead.go);
	// aheadBlocks is slot_fill_ahead's grid, scratch the guesses' ring,
	// pending the layers whose read-ahead the pass has not waited for.
	readAhead   bool
	aheadBlocks int
	aheadDist   int
	scratch     []aheadScratch
	pending     []bool
	// noCopy is an int32 slot_fill and slot_fill_ahead read: nonzero skips
	// the copies (copywait.go's measurement only).
	noCopy cuda.DevicePtr
	// host is the RAM tier and the host-side slot tables when RAM cannot
	// hold every expert (expertstream's host.go); nil: device-planned.
	host *expertstream.HostTier
}

// readAheadFromEnv reads NVMAI_GPU_READAHEAD (0 off, 1 or unset on) and
// NVMAI_GPU_READAHEAD_BLOCKS (slot_fill_ahead's grid, default
// gpukernels.DefaultAheadBlocks), measurement knobs.
func readAheadFromEnv() (on bool, blocks int, err error) {
	on = true
	switch v := os.Getenv("NVMAI_GPU_READAHEAD"); v {
	case "", "1":
	case "0":
		on = false
	default:
		return false, 0, fmt.Errorf("gpu: NVMAI_GPU_READAHEAD=%q: want 0 (off) or 1 (on, the default)", v)
	}
	blocks = gpukernels.DefaultAheadBlocks
	if v := os.Getenv("NVMAI_GPU_READAHEAD_BLOCKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 4096 {
			return false, 0, fmt.Errorf("gpu: NVMAI_GPU_READAHEAD_BLOCKS=%q: want a block count from 1 to 4096", v)
		}
		blocks = n
	}
	return on, blocks, nil
}

// readsAhead reports whether st's decode steps read ahead: not under a
// routing replay, whose picks the router's guesses cannot foresee (on the
// H100, 4-bit 40-layer synthetic at 12 GiB, agent replay: 0.4% of the guesses
// used, 112 tok/s with read-ahead against 267 without), as the CPU engine
// turns its read-ahead off under replay. SetRouteOverride recaptures the
// decode graph when replay starts or stops, so fork and join stay paired.
func (m *Model) readsAhead(st *State) bool {
	return m.stream != nil && m.stream.readAhead && st.replay.o == nil
}

// routedExperts enqueues what layer ly's expert products need after
// Route wrote s.sel, and returns the matrices and the selection they
// gather by: the resident buffers and s.sel, or for a streamed layer the
// pool and the decode step's slots (T == 1), or the staging buffer and
// s.sel (prefill).
func (m *Model) routedExperts(l *gpukernels.Launcher, st *State, ly *layerW, T int, do func(error)) (gate, up, down *gpukernels.Mat, sel cuda.DevicePtr) {
	s, sl := &st.s, ly.stream
	if sl == nil {
		return ly.eGate, ly.eUp, ly.eDown, s.sel
	}
	if m.stream.host != nil { // the host plans this layer's copies (streamhost.go)
		return m.hostRoutedExperts(l, st, ly, T, do)
	}
	g, x := m.geom, m.stream
	if T == 1 {
		m.joinAhead(l, sl.layer, do) // the layer's read-ahead copies land before its picks resolve
		do(expertstream.Resolve(l, sl.slotSel, sl.pool, sl.hostDev, sl.tab, sl.stats, s.sel, x.noCopy, g.E, x.slots, g.k, x.stride))
		return sl.gate, sl.up, sl.down, sl.slotSel
	}
	do(expertstream.Stage(l, x.staging, x.need, sl.pool, sl.hostDev, sl.tab, sl.stats, s.sel, T*g.k, g.E, x.stride))
	return ly.eGate, ly.eUp, ly.eDown, s.sel
}

// planExperts sizes the experts' place from the options and the device
// memory free when Load began (the trunk is uploaded by now).
func (m *Model) planExperts(ex *packexperts.Experts) (Plan, error) {
	cfg, g := m.cfg, m.geom
	budget, reserve := m.opt.VRAMBudget, int64(0)
	auto := budget <= 0
	if auto {
		reserve = autoReserve(m.total0)
		budget = int64(m.free0) - reserve
	} else if budget > int64(m.free0) {
		return Plan{}, fmt.Errorf("gpu: --vram-budget %s is more than the %s of VRAM free on %s; lower it, or use auto", gib(budget), gib(int64(m.free0)), m.dev.Name)
	}
	ctx := m.opt.MaxContext
	if ctx <= 0 {
		ctx = DefaultPlanContext
	}
	ctx = min(ctx, cfg.MaxContext)
	force, err := slotsFromEnv(os.Getenv("NVMAI_GPU_SLOTS"))
	if err != nil {
		return Plan{}, err
	}
	p, err := PlanExperts(PlanInput{Budget: budget, TrunkBytes: m.WeightBytes, StateBytes: stateBytes(cfg, g, m.chunk, ctx, m.kvBits()), PlanContext: ctx, KVBits: m.kvBits(),
		Stride: ex.Stride, Layers: len(m.layers), Experts: g.E, TopK: g.k, ForceSlots: force})
	p.BudgetAuto, p.Reserve = auto, reserve
	if err != nil {
		return p, err
	}
	if !p.Resident() {
		// RAM that cannot page-lock every expert puts the host in charge of
		// the copies, from a RAM tier backed by the disk (streamhost.go).
		force, err := expertstream.HostPlannedFromEnv()
		if err != nil {
			return p, err
		}
		avail, _ := expertstream.MemAvailable()
		t, err := expertstream.PlanRAMTier(expertstream.RAMTierInput{Budget: m.opt.RAMBudget, Avail: avail, Force: force, Experts: ex, Pinned: p.PinnedBytes})
		if err != nil {
			return p, err
		}
		if t.HostPlanned {
			p.setRAMTier(t.Slots, t.Why)
		} else if p.Slots > gpukernels.MaxSlots {
			return p, fmt.Errorf("gpu: the plan gives %d expert slots a layer, past the kernels' %d; raise --vram-budget so every expert fits, or run --engine cpu", p.Slots, gpukernels.MaxSlots)
		}
	}
	return p, nil
}

// streamExperts loads every layer's experts into page-locked host memory
// and sets up the slot pools, tables and the staging buffer (the plan
// streams). offsets gives a part's data, scales and biases offsets in a
// record.
func (m *Model) streamExperts(c *cuda.Ctx, p Plan, dir string, ex *packexperts.Experts, byLayer map[int]string,
	gate, up, down *kernels.Matrix, offsets func(*kernels.Matrix) (d, s, b int64)) error {
	g := m.geom
	E, S, k, stride := g.E, p.Slots, g.k, ex.Stride
	x := &streamer{slots: S, stride: stride, layers: make([]*streamLayer, len(m.layers))}
	m.stream = x
	var err error
	alloc := func(n int64) cuda.DevicePtr {
		if err != nil {
			return 0
		}
		ptr, e := c.Alloc(uint64(max(n, 4)))
		if e != nil {
			err = fmt.Errorf("gpu: no room in VRAM for %s of streamed-expert buffers: %w", mib(n), e)
			return 0
		}
		m.allocs = append(m.allocs, ptr)
		return ptr
	}
	x.staging, x.need = alloc(int64(E)*stride), alloc(4*int64(E))
	x.stats = alloc(8 * gpukernels.SlotStatsWords * int64(len(m.layers)))
	on, blocks, envErr := readAheadFromEnv()
	if envErr != nil {
		return envErr
	}
	// Host-planned layers resolve their picks on the host: no guesses.
	x.readAhead, x.aheadBlocks = on && !p.HostPlanned, blocks
	dist, distErr := aheadDistFromEnv()
	if distErr != nil {
		return distErr
	}
	x.aheadDist = dist
	x.noCopy = alloc(4)
	if x.readAhead {
		if err := x.allocAhead(c, g, len(m.layers), alloc); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if err := c.Memset32(x.stats, 0, uint64(2*gpukernels.SlotStatsWords*len(m.layers))); err != nil {
		return err
	}
	if err := c.Memset32(x.noCopy, 0, 1); err != nil {
		return err
	}
	size := int64(E) * stride
	tabWords := gpukernels.SlotTableWords(E, S, k)
	if p.HostPlanned {
		h, err := expertstream.OpenRAMTier(c, (*expertstream.Plan)(&m.plan), dir, ex, len(m.layers), "gpu")
		if h != nil {
			x.host = h // freeHost closes it, on error too
		}
		if err != nil {
			return err
		}
	}
	cacheLayer := map[int]int{}
	for j, l := range ex.Layers {
		cacheLayer[l.Layer] = j
	}
	for i := range m.layers {
		file, ok := byLayer[i]
		if !ok {
			return fmt.Errorf("gpu: the manifest lists no expert file for layer %d", i)
		}
		sl := &streamLayer{layer: i}
		x.layers[i] = sl
		if x.host != nil {
			x.host.AddLayer(i, cacheLayer[i], S)
		} else {
			host, hostDev, herr := expertstream.PinLayer(c, filepath.Join(dir, file), size, i, p.PinnedBytes)
			if herr != nil {
				return herr
			}
			sl.host, sl.hostDev = host, hostDev
		}
		sl.pool, sl.tab, sl.slotSel = alloc(int64(S)*stride), alloc(4*int64(tabWords)), alloc(4*int64(k))
		if err != nil {
			return err
		}
		sl.stats = x.stats + cuda.DevicePtr(8*gpukernels.SlotStatsWords*i)
		// slotOf and expertOf −1 (nothing in VRAM), the rest 0.
		if err := expertstream.InitTable(c, sl.tab, E, S, k); err != nil {
			return err
		}
		m.WeightBytes += int64(S) * stride
		ly := &m.layers[i]
		ly.stream = sl
		for _, pr := range []struct {
			staged, pooled **gpukernels.Mat
			mt             *kernels.Matrix
		}{{&ly.eGate, &sl.gate, gate}, {&ly.eUp, &sl.up, up}, {&ly.eDown, &sl.down, down}} {
			d, s, b := offsets(pr.mt)
			if d%16 != 0 || stride%16 != 0 {
				return fmt.Errorf("gpu: expert part at offset %d (stride %d) is not 16-byte aligned", d, stride)
			}
			mat := func(base cuda.DevicePtr) *gpukernels.Mat {
				mt := &gpukernels.Mat{Rows: pr.mt.Rows, Cols: pr.mt.Cols, Enc: pr.mt.Enc, Data: base + cuda.DevicePtr(d), EData: stride, EScale: stride}
				if pr.mt.Enc == kernels.Q4 || pr.mt.Enc == kernels.Q8 {
					mt.Scales, mt.Biases = base+cuda.DevicePtr(s), base+cuda.DevicePtr(b)
				}
				return mt
			}
			*pr.staged, *pr.pooled = mat(x.staging), mat(sl.pool)
			n := int64(g.k) * int64(len(pr.mt.Data)+len(pr.mt.Scales)+len(pr.mt.Biases))
			m.TokenBytes += n
			m.phaseBytes[PhaseMoE] += n
		}
		ly.moeGrouped = ly.eGate.Quantized() && ly.eUp.Quantized() && ly.eDown.Quantized()
		ly.moeFused = ly.moeGrouped && g.Is == g.I && ly.sGate.Quantized() && ly.sUp.Quantized() &&
			ly.sDown.Enc == ly.eDown.Enc && ly.sDown.Rows == ly.eDown.Rows && ly.sDown.Cols == ly.eDown.Cols
	}
	src := x.layers[0].host
	if x.host != nil { // the RAM tier's first slab, as the copies read it
		src = x.host.FirstSlab()
	}
	rate, err := expertstream.H2DRate(c, x.staging, src)
	if err != nil {
		return err
	}
	m.plan.setH2D(rate)
	return nil
}

// freeHost releases the pinned experts.
func (x *streamer) freeHost(c *cuda.Ctx) {
	if x.host != nil {
		x.host.Close(c)
	}
	for _, sl := range x.layers {
		if sl != nil && sl.host != nil {
			c.HostFree(sl.host)
			sl.host = nil
		}
	}
}

// StreamStats are the streamed experts' counters (expertstream.StreamStats,
// shared with qwen38gpu).
type StreamStats = expertstream.StreamStats

// StreamStats reads the counters; ok is false when the experts are
// resident.
func (m *Model) StreamStats() (s StreamStats, ok bool, err error) {
	x := m.stream
	if x == nil {
		return s, false, nil
	}
	if x.host != nil { // the counters are the host's, read on the device goroutine that writes them
		err := m.dev.Do(func(*cuda.Ctx) error { s = x.host.StreamStats(len(x.layers)); return nil })
		return s, true, err
	}
	raw := make([]uint64, gpukernels.SlotStatsWords*len(x.layers))
	if err := m.dev.Do(func(c *cuda.Ctx) error { return c.DtoH(cuda.Bytes(raw), x.stats) }); err != nil {
		return s, true, err
	}
	return expertstream.SumCounters(raw, len(x.layers)), true, nil
}

// Plan is where the experts live, as Load decided it.
func (m *Model) Plan() Plan { return m.plan }

// ExpertStats is the streamed experts' counters as the CPU expert cache
// reports its own (runtime.Engine.ExpertStats, the bench): a hit is an
// expert found in a VRAM slot (decode picks and prefill's staged experts),
// a miss one copied from pinned RAM, BytesRead the bytes copied over the
// bus (read-ahead copies included, which are Prefetched, PrefetchHits
// those a step then used, and PrefetchBytes). Device-planned, nothing is
// waited for on the host, so ReadSeconds and WaitSeconds stay 0;
// host-planned (streamhost.go), ReadSeconds is the disk reads' time in
// flight and WaitSeconds the host's time blocked on them and on stream
// syncs (StreamStats has the RAM tier's hits and misses and the disk
// bytes). Zero when the experts are resident (or the counters cannot be
// read).
func (b *Backend) ExpertStats() expertcache.Stats {
	s, ok, err := b.Model.StreamStats()
	if !ok || err != nil {
		return expertcache.Stats{}
	}
	return b.expertStatsOf(s)
}

// StreamsExperts reports whether the experts stream into VRAM slots (the
// bench then reports the slot cache's figures).
func (b *Backend) StreamsExperts() bool { return b.Model.stream != nil }
