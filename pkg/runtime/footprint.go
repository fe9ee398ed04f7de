package runtime

import (
	"cmp"
	"fmt"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/model"
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
	Device      string // as Options.Device ("" = the CPU)
	KVBits      int    // 0 = model.DefaultKVBits
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
	// PassScratch bounds a long prefill pass's activations: a smaller
	// budget when experts stream, never more than a pass of MaxContext.
	PassScratch int64
	// NgramBuffers is what the n-gram table reader holds (qwen4_exp
	// installs): one pass's rows read ahead per PLE layer and the readers'
	// aligned page buffers. The rows come from SSD, never from memory.
	NgramBuffers int64
	Total        int64
	// Sequences is how many sequence states (KV, its growth, recurrent)
	// Total counts: 0 or 1 for one; WithSequences sets more.
	Sequences int
	// Device is the engine's device when it is not the CPU: its experts,
	// KV cache and sequence state are then in device memory, not counted.
	Device string
}

// ComputeFootprint sizes a process over in with opt: the resident weights
// and expert slots by the expert cache's rules, the sequence state by the
// model's registered Footprinter (the rules its States apply).
func ComputeFootprint(in *Install, opt FootprintOptions) (Footprint, error) {
	entry, err := model.Lookup(in.Manifest.Architecture, cmp.Or(opt.Device, model.CPU))
	if err != nil {
		return Footprint{}, err
	}
	f := Footprint{Resident: int64(len(in.resident))}
	if d := cmp.Or(opt.Device, model.CPU); d != model.CPU {
		f.Device = d
	}
	var streamed int64
	if x := in.Manifest.Experts; x != nil && !entry.HoldsExperts {
		mode, _ := expertcache.BoundedIOFromEnv()
		f.Slots, err = expertcache.SlotsPerLayer(in.Manifest, expertcache.Options{Budget: opt.Experts.Budget, Slots: opt.Experts.Slots, IO: mode})
		if err != nil {
			return Footprint{}, err
		}
		f.ExpertSlots = int64(f.Slots) * x.Stride * int64(len(x.Layers))
		if f.Slots > 0 && f.Slots < in.Manifest.Geometry.NumExperts {
			streamed = f.ExpertSlots
		}
	}
	sf, err := entry.Footprint(model.FootprintRequest{Manifest: in.Manifest, KVBits: opt.KVBits, MaxContext: opt.MaxContext,
		RopeScaling: opt.RopeScaling, Threads: opt.Threads, StreamedExpertBytes: streamed, IOThreads: opt.Experts.IOThreads})
	if err != nil {
		return Footprint{}, err
	}
	f.KV, f.KVGrowth, f.KVBits, f.MaxContext, f.Recurrent = sf.KV, sf.KVGrowth, sf.KVBits, sf.MaxContext, sf.Recurrent
	f.Scratch = sf.Attention + FootprintOverhead
	f.PassScratch, f.NgramBuffers = sf.PassScratch, sf.ReadBuffers
	f.Total = f.Resident + f.ExpertSlots + f.KV + f.KVGrowth + f.Recurrent + f.Scratch + f.PassScratch + f.NgramBuffers
	return f, nil
}

// SequenceState is what one sequence state holds at most: its KV cache at
// MaxContext, the growth transient and the recurrent state.
func (f Footprint) SequenceState() int64 { return f.KV + f.KVGrowth + f.Recurrent }

// WithSequences is f with n sequence states (serve --parallel n) instead of
// the one f counts: each state is sized for MaxContext, since any may grow
// to it.
func (f Footprint) WithSequences(n int) Footprint {
	f.Total += int64(n-max(f.Sequences, 1)) * f.SequenceState()
	f.Sequences = n
	return f
}

// String is the one line the CLIs print at start.
func (f Footprint) String() string {
	s := func(b int64) string { return expertcache.FormatSize(b) }
	state := fmt.Sprintf("KV %s (%d-bit × %d tokens, +%s while growing) + recurrent %s", s(f.KV), f.KVBits, f.MaxContext, s(f.KVGrowth), s(f.Recurrent))
	if f.Sequences > 1 {
		state = fmt.Sprintf("%d sequence states × (%s)", f.Sequences, state)
	}
	line := fmt.Sprintf("footprint %s: resident %s + experts %s (%d slots/layer) + %s + scratch %s",
		s(f.Total), s(f.Resident), s(f.ExpertSlots), f.Slots, state, s(f.Scratch))
	if f.PassScratch > 0 {
		line += " + long prefill passes " + s(f.PassScratch)
	}
	if f.NgramBuffers > 0 {
		line += " + n-gram read buffers " + s(f.NgramBuffers)
	}
	if f.Device != "" {
		line += fmt.Sprintf(" (host memory; the %s engine keeps the experts, KV cache and sequence state in device memory)", f.Device)
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
