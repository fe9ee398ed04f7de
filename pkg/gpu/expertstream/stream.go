package expertstream

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Streamed experts (docs/gpu.md, "Streaming experts into VRAM"): when the
// plan gives a MoE layer S < E slots, every expert of the layer sits in
// page-locked host memory mapped into the device, and S of them in a VRAM
// slot pool. A decode step resolves its picks to slots on the device
// (slot_resolve: hits, and least-recently-used slots for the misses) and
// copies the misses from the host (slot_fill), inside the decode graph;
// the expert products then gather from the pool by slot. A prefill pass
// copies every expert it needs into a staging buffer indexed by expert id
// (expert_need, expert_stage: from a slot when the expert has one, else
// from the host) and runs the products on it with the router's ids; it
// leaves the slot tables as they were. The products are the resident
// engine's kernels on the same bytes, so the output is bitwise the same.

// Layer is one streamed MoE layer (device-planned).
type Layer struct {
	Host    []byte         // every expert, page-locked: expert e at e·Stride
	HostDev cuda.DevicePtr // Host as the device reads it
	Pool    cuda.DevicePtr // S slots of Stride bytes
	Tab     cuda.DevicePtr // slot_resolve's table (gpukernels.SlotTableWords)
	Stats   cuda.DevicePtr // gpukernels.SlotStatsWords counters
	SlotSel cuda.DevicePtr // [k] a decode step's slots, router order
	Index   int            // the decoder's index
	// Pooled and Staged are the layer's gate, up and down over the pool
	// (by slot) and over the staging buffer (by expert id).
	Pooled, Staged [3]*gpukernels.Mat
}

// Streamer is a model's streamed experts, device-planned, or host-planned
// through Host (host.go) when the plan says RAM cannot page-lock every
// expert: the engines without read-ahead (qwen38gpu) use it whole; pkg/gpu
// builds its own from the same pieces (InitTable, PinLayer, H2DRate,
// SumCounters, HostTier) because its read-ahead hangs off it.
type Streamer struct {
	E, K, Slots int
	Stride      int64
	Staging     cuda.DevicePtr // E records: a prefill pass's experts by id
	Need        cuda.DevicePtr // [E] int32: the experts a prefill pass routes to
	Stats       cuda.DevicePtr // every streamed layer's counters, in Layers' order
	NoCopy      cuda.DevicePtr // int32 slot_fill reads: nonzero skips the copies (measurements only)
	Layers      []*Layer       // by the decoder's index; nil: the layer is not streamed
	streamed    []*Layer       // Layers' non-nil entries, in order
	// Host is the RAM tier and the host-side slot tables when the plan is
	// host-planned (host.go); nil: device-planned. Its layers' Host and
	// HostDev stay empty: the copies come from the tier.
	Host *HostTier
}

// HostPlanned reports whether the host plans the copies (no decode graph:
// the host reads each streamed layer's picks back).
func (s *Streamer) HostPlanned() bool { return s != nil && s.Host != nil }

// Open sets up the streamed experts the plan p gives S < E slots a layer:
// every layer layers marks has its expert file (x.ByLayer, under dir)
// read into page-locked host memory, a slot pool and table, and its
// products' matrices over the pool and the staging buffer. A host-planned
// plan instead opens the RAM tier over the files ex lists (OpenRAMTier,
// which records its mode and page-locking in p) and gives each layer its
// host-side table. alloc takes device memory the caller frees. On error
// the streamer returned, when not nil, holds the layers pinned so far (or
// the RAM tier): the caller frees them with FreeHost, as after success.
func Open(c *cuda.Ctx, p *Plan, dir string, ex *packexperts.Experts, x *devshared.Experts, layers []bool, engine string, alloc func(n int64) (cuda.DevicePtr, error)) (*Streamer, error) {
	E, S, k, stride := p.Experts, p.Slots, p.TopK, x.Stride()
	if S >= E || S < k {
		return nil, fmt.Errorf("%s: stream: %d slots a layer for %d experts top-%d", engine, S, E, k)
	}
	if S > gpukernels.MaxSlots && !p.HostPlanned { // the host's table has no kernel's limit
		return nil, fmt.Errorf("%s: the plan gives %d expert slots a layer, past the kernels' %d; raise --vram-budget so every expert fits, or run --engine cpu", engine, S, gpukernels.MaxSlots)
	}
	s := &Streamer{E: E, K: k, Slots: S, Stride: stride, Layers: make([]*Layer, len(layers))}
	var err error
	get := func(n int64) cuda.DevicePtr {
		if err != nil {
			return 0
		}
		ptr, e := alloc(max(n, 4))
		if e != nil {
			err = fmt.Errorf("%s: no room in VRAM for %s of streamed-expert buffers: %w", engine, MiB(n), e)
		}
		return ptr
	}
	n := 0
	for _, on := range layers {
		if on {
			n++
		}
	}
	s.Staging, s.Need = get(int64(E)*stride), get(4*int64(E))
	s.Stats, s.NoCopy = get(8*gpukernels.SlotStatsWords*int64(max(n, 1))), get(4)
	if err != nil {
		return nil, err
	}
	if err := c.Memset32(s.Stats, 0, uint64(2*gpukernels.SlotStatsWords*n)); err != nil {
		return nil, err
	}
	if err := c.Memset32(s.NoCopy, 0, 1); err != nil {
		return nil, err
	}
	staged, err := x.Mats(engine, s.Staging)
	if err != nil {
		return nil, err
	}
	tabWords := gpukernels.SlotTableWords(E, S, k)
	if p.HostPlanned {
		h, herr := OpenRAMTier(c, p, dir, ex, len(layers), engine)
		s.Host = h
		if herr != nil {
			return s, herr
		}
	}
	cacheLayer := map[int]int{}
	for j, l := range ex.Layers {
		cacheLayer[l.Layer] = j
	}
	for i, on := range layers {
		if !on {
			continue
		}
		file, ok := x.ByLayer[i]
		if !ok {
			return s, fmt.Errorf("%s: the manifest lists no expert file for layer %d", engine, i)
		}
		sl := &Layer{Index: i, Staged: staged}
		if s.Host != nil {
			s.Host.AddLayer(i, cacheLayer[i], S)
		} else {
			host, hostDev, perr := PinLayer(c, filepath.Join(dir, file), int64(E)*stride, i, p.PinnedBytes)
			if perr != nil {
				return s, perr
			}
			sl.Host, sl.HostDev = host, hostDev
		}
		s.Layers[i] = sl
		s.streamed = append(s.streamed, sl)
		sl.Pool, sl.Tab, sl.SlotSel = get(int64(S)*stride), get(4*int64(tabWords)), get(4*int64(k))
		if err != nil {
			return s, err
		}
		sl.Stats = s.Stats + cuda.DevicePtr(8*gpukernels.SlotStatsWords*(len(s.streamed)-1))
		if err := InitTable(c, sl.Tab, E, S, k); err != nil {
			return s, err
		}
		if sl.Pooled, err = x.Mats(engine, sl.Pool); err != nil {
			return s, err
		}
	}
	return s, nil
}

// Decode enqueues a decode step's resolve and fill of layer sl: the k
// picks sel holds (router order) resolved to slots in sl.SlotSel, the
// misses copied from host memory; the products then gather from
// sl.Pooled by sl.SlotSel. Host-planned, the host reads the picks back,
// resolves them and copies the misses from the RAM tier (HostTier.Decode):
// the step cannot be captured into a graph.
func (s *Streamer) Decode(l *gpukernels.Launcher, sl *Layer, sel cuda.DevicePtr) error {
	if s.Host != nil {
		return s.Host.Decode(l.C, s.Host.Layer(sl.Index), sel, sl.Pool, sl.SlotSel)
	}
	return Resolve(l, sl.SlotSel, sl.Pool, sl.HostDev, sl.Tab, sl.Stats, sel, s.NoCopy, s.E, s.Slots, s.K, s.Stride)
}

// Resolve enqueues a decode step's slot_resolve (the k picks sel holds to
// slots in slotSel, hits and least-recently-used slots for the misses)
// and slot_fill (the misses copied from hostDev into pool; skipped while
// the int32 at noCopy is nonzero): both engines' streamed decode.
func Resolve(l *gpukernels.Launcher, slotSel, pool, hostDev, tab, stats, sel, noCopy cuda.DevicePtr, E, S, k int, stride int64) error {
	if err := l.SlotResolve(slotSel, tab, stats, sel, E, S, k, stride); err != nil {
		return err
	}
	return l.SlotFill(pool, hostDev, tab, E, S, k, stride, noCopy)
}

// Stage enqueues a prefill pass's staging of layer sl: every expert the n
// picks of sel name copied into the staging buffer at its id (from its
// slot when it has one, else from host memory); the products then gather
// from sl.Staged by sel, and the slot tables stay as they were.
// Host-planned, the host stages them from the RAM tier (HostTier.Stage).
func (s *Streamer) Stage(l *gpukernels.Launcher, sl *Layer, sel cuda.DevicePtr, n int) error {
	if s.Host != nil {
		return s.Host.Stage(l.C, s.Host.Layer(sl.Index), sel, sl.Pool, s.Staging, n/s.K)
	}
	return Stage(l, s.Staging, s.Need, sl.Pool, sl.HostDev, sl.Tab, sl.Stats, sel, n, s.E, s.Stride)
}

// Stage enqueues a prefill pass's expert_need (the experts the n picks of
// sel name, into need) and expert_stage (each copied into staging at its
// id, from its slot of pool when the table gives it one, else from
// hostDev): both engines' streamed prefill.
func Stage(l *gpukernels.Launcher, staging, need, pool, hostDev, tab, stats, sel cuda.DevicePtr, n, E int, stride int64) error {
	if err := l.ExpertNeed(need, sel, n, E); err != nil {
		return err
	}
	return l.ExpertStage(staging, pool, hostDev, need, tab, stats, E, stride)
}

// ReadStats reads every streamed layer's counters back (one copy); Layers
// has a row for each of the decoder's layers, zero where not streamed.
// Host-planned, the counters are the host's (read on the goroutine that
// runs the passes, as c's holder is).
func (s *Streamer) ReadStats(c *cuda.Ctx) (StreamStats, error) {
	if s.Host != nil {
		return s.Host.StreamStats(len(s.Layers)), nil
	}
	raw := make([]uint64, gpukernels.SlotStatsWords*max(len(s.streamed), 1))
	if err := c.DtoH(cuda.Bytes(raw), s.Stats); err != nil {
		return StreamStats{}, err
	}
	byLayer := make([]uint64, gpukernels.SlotStatsWords*len(s.Layers))
	for j, sl := range s.streamed {
		copy(byLayer[sl.Index*gpukernels.SlotStatsWords:], raw[j*gpukernels.SlotStatsWords:(j+1)*gpukernels.SlotStatsWords])
	}
	return SumCounters(byLayer, len(s.Layers)), nil
}

// FirstHost is the first streamed layer's pinned experts, or host-planned
// the RAM tier's first slab (H2DRate's source).
func (s *Streamer) FirstHost() []byte {
	if s.Host != nil {
		return s.Host.FirstSlab()
	}
	if len(s.streamed) == 0 {
		return nil
	}
	return s.streamed[0].Host
}

// FreeHost releases the pinned experts, or closes the RAM tier.
func (s *Streamer) FreeHost(c *cuda.Ctx) {
	if s.Host != nil {
		s.Host.Close(c)
	}
	for _, sl := range s.streamed {
		if sl.Host != nil {
			c.HostFree(sl.Host)
			sl.Host = nil
		}
	}
}

// InitTable sets a layer's slot table to nothing in VRAM: slotOf and
// expertOf −1, the rest 0.
func InitTable(c *cuda.Ctx, tab cuda.DevicePtr, E, S, k int) error {
	if err := c.Memset32(tab, 0xffffffff, uint64(E+S)); err != nil {
		return err
	}
	return c.Memset32(tab+cuda.DevicePtr(4*(E+S)), 0, uint64(gpukernels.SlotTableWords(E, S, k)-E-S))
}

// PinLayer page-locks size bytes of host memory mapped into the device and
// reads layer's expert file (exactly size bytes) into it; pinnedTotal is
// every streamed layer's, for the error.
func PinLayer(c *cuda.Ctx, path string, size int64, layer int, pinnedTotal int64) ([]byte, cuda.DevicePtr, error) {
	host, hostDev, err := c.HostAlloc(uint64(size))
	if err != nil {
		return nil, 0, fmt.Errorf("gpu: pinning %s of RAM for the experts of layer %d: %w; device-planned streaming needs every expert in page-locked RAM (%s in all): set --ram-budget below that to stream from disk through a RAM tier, raise --vram-budget, free RAM, or run --engine cpu",
			MiB(size), layer, err, GiB(pinnedTotal))
	}
	if err := ReadExpertFile(path, host); err != nil {
		c.HostFree(host)
		return nil, 0, err
	}
	return host, hostDev, nil
}

// MemAvailable reads MemAvailable from /proc/meminfo.
func MemAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// ReadExpertFile reads a layer's expert file, exactly len(dst) bytes, into
// dst.
func ReadExpertFile(path string, dst []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != int64(len(dst)) {
		return fmt.Errorf("gpu: %s should be %d bytes; run nvmai-verify --verify-install on the install", path, len(dst))
	}
	const chunk = 64 << 20
	for off := 0; off < len(dst); off += chunk {
		if _, err := io.ReadFull(f, dst[off:min(off+chunk, len(dst))]); err != nil {
			return fmt.Errorf("gpu: reading %s at %d: %w", path, off, err)
		}
	}
	return nil
}

// H2DMeasureBytes is how much the load copies from pinned memory to time
// the host-to-device link.
const H2DMeasureBytes = 256 << 20

// H2DRate times copies of src (page-locked) to dst, at least
// H2DMeasureBytes in all, between two events: bytes per second.
func H2DRate(c *cuda.Ctx, dst cuda.DevicePtr, src []byte) (float64, error) {
	if len(src) == 0 {
		return 0, nil
	}
	if err := c.HtoDAsync(dst, src); err != nil { // warm
		return 0, err
	}
	reps := (H2DMeasureBytes + len(src) - 1) / len(src)
	start, err := c.Record()
	if err != nil {
		return 0, err
	}
	defer c.Destroy(start)
	for range reps {
		if err := c.HtoDAsync(dst, src); err != nil {
			return 0, err
		}
	}
	end, err := c.Record()
	if err != nil {
		return 0, err
	}
	defer c.Destroy(end)
	ms, err := c.Elapsed(start, end)
	if err != nil || ms <= 0 {
		return 0, err
	}
	return float64(reps) * float64(len(src)) / (ms / 1e3), nil
}

// StreamStats are the streamed experts' counters, read back from the
// device (on demand: nothing is read per step).
type StreamStats struct {
	// Decode steps: picks found in a VRAM slot, picks copied from pinned
	// RAM, and the bytes those copies moved over the bus.
	DecodeHits, DecodeMisses, DecodeBytes int64
	// Prefill passes: experts staged from a VRAM slot, from pinned RAM,
	// and the bytes the latter moved over the bus.
	PrefillFromVRAM, PrefillFromHost, PrefillBytes int64
	// Read-ahead (decode): experts guessed, picks that had been guessed,
	// guesses copied ahead (not in VRAM yet), picks found in a slot
	// copied ahead for them, and the bytes copied ahead. Guesses used is
	// AheadUsed/AheadCopies; PCIe bytes are DecodeBytes + AheadBytes.
	Guesses, Guessed, AheadCopies, AheadUsed, AheadBytes int64
	Layers                                               [][gpukernels.SlotStatsWords]int64
	HostTierStats                                        // host-planned: the RAM tier, disk, host waits
}

// HostTierStats are StreamStats' host-planned figures: the RAM tier's
// hits and misses (each a VRAM miss; a RAM miss reads the expert from
// disk), the bytes read from disk and the time reads were in flight, and
// the host's time blocked: in the RAM tier (AcquireSeconds: disk reads)
// and in stream syncs (SyncSeconds: reading picks back, which waits for
// the layer's work and the copies before it, and prefill's copies).
type HostTierStats struct {
	HostPlanned                              bool
	RAMHits, RAMMisses, DiskBytes            int64
	DiskSeconds, AcquireSeconds, SyncSeconds float64
}

// The words of a layer's slot counters (gpukernels.SlotStatsWords) that
// StreamStats sums: decode hits, misses and bytes; prefill's experts
// staged from a slot, from host RAM, and the bytes; read-ahead's guesses,
// picks guessed, copies, copies used and bytes.
const (
	WordDecodeHits = iota
	WordDecodeMisses
	WordDecodeBytes
	WordPrefillFromVRAM
	WordPrefillFromHost
	WordPrefillBytes
	WordGuesses
	WordGuessed
	WordAheadCopies
	WordAheadUsed
	WordAheadBytes
)

// SumCounters is StreamStats of raw, layers rows of
// gpukernels.SlotStatsWords counters as the kernels write them.
func SumCounters(raw []uint64, layers int) StreamStats {
	var s StreamStats
	s.Layers = make([][gpukernels.SlotStatsWords]int64, layers)
	for i := range layers {
		for j := range gpukernels.SlotStatsWords {
			s.Layers[i][j] = int64(raw[i*gpukernels.SlotStatsWords+j])
		}
		l := s.Layers[i]
		s.DecodeHits += l[WordDecodeHits]
		s.DecodeMisses += l[WordDecodeMisses]
		s.DecodeBytes += l[WordDecodeBytes]
		s.PrefillFromVRAM += l[WordPrefillFromVRAM]
		s.PrefillFromHost += l[WordPrefillFromHost]
		s.PrefillBytes += l[WordPrefillBytes]
		s.Guesses += l[WordGuesses]
		s.Guessed += l[WordGuessed]
		s.AheadCopies += l[WordAheadCopies]
		s.AheadUsed += l[WordAheadUsed]
		s.AheadBytes += l[WordAheadBytes]
	}
	return s
}
