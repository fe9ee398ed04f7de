package runtime

import (
	"fmt"
	goruntime "runtime"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime/qwen35"
	"github.com/nvmai/nvmai/pkg/runtime/qwen38"
)

// FootprintOverhead is the fixed part of a generating process's memory
// beyond resident weights, expert slots, sequence state and attention
// scratch: the Go runtime and the binary's text, the tokenizer, the forward
// pass's other scratch and garbage-collector headroom. Measured on the
// 4-layer 35B-A3B synthetic install (scripts/footprint.sh; its OVERHEAD_MIB
// must stay equal); TestFootprintWithinBudget checks it.
const FootprintOverhead = 160 << 20

// FootprintOptions are the choices that size a process's memory.
type FootprintOptions struct {
	Experts     ExpertOptions
	KVBits      int    // 0 = qwen35.DefaultKVBits
	MaxContext  int    // tokens the KV cache may grow to; 0 or more than the model's = the model's maximum
	RopeScaling string // "" or "yarn" (then MaxContext is required)
	Threads     int    // compute threads; each holds its own attention scores
}

// Footprint is what a process serving one sequence of MaxContext tokens
// holds at most, in bytes.
type Footprint struct {
	Resident    int64 // resident.bin: every weight but the routed experts
	ExpertSlots int64 // slots × expert stride × MoE layers
	Slots       int   // per layer
	KV          int64 // K and V of every full-attention layer at KVBits for MaxContext tokens
	KVGrowth    int64 // the previous KV capacity, held while the last doubling copies it
	KVBits      int
	MaxContext  int
	Recurrent   int64 // Gated DeltaNet conv windows and recurrent matrices (float32)
	Scratch     int64 // attention scores of every thread at MaxContext, plus FootprintOverhead
	// PassScratch bounds a long prefill pass's activations:
	// qwen35.PassScratchBudget when experts stream, else
	// qwen35.PrefillScratchBudget, never more than a pass of MaxContext.
	PassScratch int64
	// NgramBuffers is what the n-gram table reader holds (qwen4_exp
	// installs): one pass's rows read ahead per PLE layer and the readers'
	// aligned page buffers. The rows come from SSD, never from memory.
	NgramBuffers int64
	Total        int64
}

// ComputeFootprint sizes a process over in with opt, by the same rules
// Load, the expert cache and qwen35.NewState apply.
func ComputeFootprint(in *Install, opt FootprintOptions) (Footprint, error) {
	cfg, err := modelConfig(in, opt.RopeScaling, opt.MaxContext)
	if err != nil {
		return Footprint{}, err
	}
	bits := opt.KVBits
	if bits == 0 {
		bits = qwen35.DefaultKVBits
	}
	if !qwen35.ValidKVBits(bits) {
		return Footprint{}, fmt.Errorf("KV cache width %d bits: use 8, 16 or 32", bits)
	}
	ctx := cfg.MaxContext // a larger MaxContext is lowered to it, as sessions lower it
	if opt.MaxContext > 0 {
		ctx = min(opt.MaxContext, cfg.MaxContext)
	}
	f := Footprint{Resident: int64(len(in.resident)), KVBits: bits, MaxContext: ctx}
	if x := in.Manifest.Experts; x != nil {
		mode, _ := expertcache.BoundedIOFromEnv()
		f.Slots, err = expertcache.SlotsPerLayer(in.Manifest, expertcache.Options{Budget: opt.Experts.Budget, Slots: opt.Experts.Slots, IO: mode})
		if err != nil {
			return Footprint{}, err
		}
		f.ExpertSlots = int64(f.Slots) * x.Stride * int64(len(x.Layers))
	}
	pass := int64(qwen35.PrefillScratchBudget)
	if f.Slots > 0 && f.Slots < in.Manifest.Geometry.NumExperts {
		pass = qwen35.PassScratchBudget(f.ExpertSlots)
	}
	// a pass is never longer than the context
	f.PassScratch = min(pass, cfg.MixerScratchBytes()+cfg.ScratchBytesPerToken()*int64(ctx))
	full := 0
	for _, k := range cfg.Layers {
		if k == qwen35.FullAttention {
			full++
		}
	}
	perToken := cfg.KVBytesPerToken(bits) * int64(full)
	f.KV = perToken * int64(ctx)
	f.KVGrowth = perToken * int64(previousCapacity(ctx))
	f.Recurrent = cfg.StateBytes(0)
	if in.Manifest.Architecture == packexperts.ArchQwen4Exp {
		if err := qwen38Footprint(in, &f, ctx, opt.Experts.IOThreads); err != nil {
			return Footprint{}, err
		}
	}
	threads := opt.Threads
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	f.Scratch = int64(threads)*int64(cfg.NumHeads/cfg.NumKVHeads)*int64(ctx)*4 + FootprintOverhead
	f.Total = f.Resident + f.ExpertSlots + f.KV + f.KVGrowth + f.Recurrent + f.Scratch + f.PassScratch + f.NgramBuffers
	return f, nil
}

// qwen38Footprint replaces the trunk's sequence state by qwen38's: a
// float32 cache with the indexer's keys, grown by append (the old backing
// array, about 4/5 of the new, is held while it copies), and the PLE conv
// windows beside the GDN state, and the n-gram reader's buffers.
func qwen38Footprint(in *Install, f *Footprint, ctx, ioThreads int) error {
	q, err := qwen38.ConfigFromGeometry(in.Manifest.Geometry)
	if err != nil {
		return err
	}
	f.KVBits = qwen35.KVFloat32
	f.KV = q.KVBytes(ctx)
	f.KVGrowth = q.KVBytes(ctx * 4 / 5)
	f.Recurrent = q.FixedStateBytes()
	f.NgramBuffers = ngramBufferBytes(q, in.Manifest.NGram, qwen38.MaxChunk(), ioThreads)
	return nil
}

// previousCapacity is the KV capacity before the last doubling that
// reaches ctx from qwen35.DefaultKVInitial (0 when no growth is needed).
func previousCapacity(ctx int) int {
	c := qwen35.DefaultKVInitial
	if ctx <= c {
		return 0
	}
	for 2*c < ctx {
		c *= 2
	}
	return c
}

// String is the one line the CLIs print at start.
func (f Footprint) String() string {
	s := func(b int64) string { return expertcache.FormatSize(b) }
	line := fmt.Sprintf("footprint %s: resident %s + experts %s (%d slots/layer) + KV %s (%d-bit × %d tokens, +%s while growing) + recurrent %s + scratch %s",
		s(f.Total), s(f.Resident), s(f.ExpertSlots), f.Slots, s(f.KV), f.KVBits, f.MaxContext, s(f.KVGrowth), s(f.Recurrent), s(f.Scratch))
	if f.PassScratch > 0 {
		line += " + long prefill passes " + s(f.PassScratch)
	}
	if f.NgramBuffers > 0 {
		line += " + n-gram read buffers " + s(f.NgramBuffers)
	}
	return line
}

// FootprintMargin is the memory left to the OS and other processes: 10% of
// the machine's, at least 1 GiB.
func FootprintMargin(memTotal int64) int64 { return max(memTotal/10, expertcache.GiB) }

// CheckFits refuses a footprint larger than memTotal minus the margin,
// with the numbers and what to change. memTotal ≤ 0 (unknown) passes.
func (f Footprint) CheckFits(memTotal int64) error {
	if memTotal <= 0 {
		return nil
	}
	room := memTotal - FootprintMargin(memTotal)
	if f.Total <= room {
		return nil
	}
	return fmt.Errorf("the %s does not fit this machine: %s of RAM less a %s margin leaves %s; lower --max-context, --ram-budget or --kv-bits, or pass --force",
		f, expertcache.FormatSize(memTotal), expertcache.FormatSize(FootprintMargin(memTotal)), expertcache.FormatSize(room))
}

// modelConfig is the install's model geometry, with YaRN applied when
// ropeScaling asks for it.
func modelConfig(in *Install, ropeScaling string, maxContext int) (qwen35.Config, error) {
	arch := in.Manifest.Architecture
	if arch == packexperts.ArchQwen4Exp {
		// The qwen3_5_moe trunk's geometry: what the footprint and the
		// CLIs read of it (context, widths, experts) is the same; the
		// streams, PLE and indexer state are not counted yet.
		arch = qwen35.ArchMoE
		if ropeScaling != "" && ropeScaling != "none" {
			return qwen35.Config{}, fmt.Errorf("rope scaling %q is not supported for qwen4_exp installs yet", ropeScaling)
		}
	}
	cfg, err := qwen35.ConfigFromGeometry(arch, in.Manifest.Geometry)
	if err != nil {
		return qwen35.Config{}, err
	}
	switch ropeScaling {
	case "", "none":
		return cfg, nil
	case qwen35.YaRN:
		if maxContext == 0 {
			maxContext = 4 * cfg.MaxContext
		}
		return cfg.WithYaRN(maxContext)
	}
	return qwen35.Config{}, fmt.Errorf("rope scaling %q: use none or yarn", ropeScaling)
}

// Config is the model's geometry as loaded (YaRN applied), whichever engine
// runs it.
func (e *Engine) Config() qwen35.Config { return e.cfg }
