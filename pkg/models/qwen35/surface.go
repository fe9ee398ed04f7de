package qwen35

import (
	"fmt"
	"io"
	goruntime "runtime"
	"sync"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// This file is qwen35 on the CPU as the engine surface (package model):
// CPU is its model.Model, CPUState its model.State, registered for both
// architectures. The snapshot codec is statecodec.go's, unchanged.

func init() {
	for _, arch := range []string{ArchMoE, ArchDense} {
		model.Register(arch, model.CPU, model.Entry{Load: LoadCPU, Footprint: Footprint})
	}
}

// ConfigFor is the geometry of an install of arch with the rotary scaling
// asked for: rope "" or model.RopeNone keeps the model's own, model.RopeYaRN
// extends it to maxContext tokens (0: 4 times the trained context).
func ConfigFor(arch string, g packexperts.Geometry, rope string, maxContext int) (Config, error) {
	cfg, err := ConfigFromGeometry(arch, g)
	if err != nil {
		return Config{}, err
	}
	switch rope {
	case "", model.RopeNone:
		return cfg, nil
	case YaRN:
		if maxContext == 0 {
			maxContext = 4 * cfg.MaxContext
		}
		return cfg.WithYaRN(maxContext)
	}
	return Config{}, fmt.Errorf("rope scaling %q: use none or yarn", rope)
}

// CPU is a loaded qwen35 model on the CPU.
type CPU struct {
	*Model
	passScratch int64 // the activations a long pass may hold

	batchMu     sync.Mutex // StepBatch's buffers below
	batchStates []*State
	batchLogits []float32 // [N, V] when the caller passes no logits
}

// LoadCPU builds the model of req on the CPU (req.Pool's threads).
func LoadCPU(req model.Request) (model.Model, error) {
	cfg, err := ConfigFor(req.Manifest.Architecture, req.Manifest.Geometry, req.RopeScaling, req.MaxContext)
	if err != nil {
		return nil, err
	}
	var ex model.Experts
	if req.Experts != nil {
		ex = req.Experts
	}
	m, err := New(cfg, req.Weights, ex, req.Pool)
	if err != nil {
		return nil, err
	}
	return &CPU{Model: m, passScratch: passScratch(req.StreamedExpertBytes)}, nil
}

// passScratch is the scratch budget of a long pass: smaller when experts
// stream, so the slots keep the memory (docs/prefill.md).
func passScratch(streamed int64) int64 {
	if streamed > 0 {
		return PassScratchBudget(streamed)
	}
	return PrefillScratchBudget
}

// Info implements model.Model.
func (c *CPU) Info() model.Info {
	cfg := c.Config()
	return model.Info{Name: model.CPU, Architecture: cfg.Arch, Device: model.CPU, VocabSize: cfg.VocabSize,
		MaxContext: cfg.MaxContext, RopeScaling: model.RopeScaling(cfg.RopeScaling)}
}

// NewState implements model.Model; a zero KVBits is model.DefaultKVBits.
func (c *CPU) NewState(opt model.StateOptions) (model.State, error) {
	bits := opt.KVBits
	if bits == 0 {
		bits = DefaultKVBits
	}
	if !ValidKVBits(bits) {
		return nil, fmt.Errorf("qwen35: KV cache width %d bits: use 8, 16 or 32", bits)
	}
	st := c.Model.NewState(StateOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: bits})
	return &CPUState{State: st, m: c.Model, logits: make([]float32, c.Config().VocabSize)}, nil
}

// PassLength implements model.PassSizer: passes as long as the scratch
// budget allows, so each streamed expert is read once per long pass.
func (c *CPU) PassLength(tokens int) int { return c.Config().PrefillChunk(tokens, c.passScratch) }

// StateBytes implements model.StateSizer.
func (c *CPU) StateBytes(tokens, kvBits int) int64 { return c.Config().StateBytesAt(tokens, kvBits) }

// Close implements model.Model: the weights belong to the install and the
// threads to the pool, which the runtime closes.
func (c *CPU) Close() {}

var _ model.BatchStepper = (*CPU)(nil)

// StepBatch implements model.BatchStepper over ForwardBatch; each state's
// last row of logits is set as its own Forward sets it.
func (c *CPU) StepBatch(states []model.State, ids []int, logits []float32) error {
	c.batchMu.Lock()
	defer c.batchMu.Unlock()
	sts := c.batchStates[:0]
	defer func() { clear(sts); c.batchStates = sts[:0] }() // hold no closed state
	for i, s := range states {
		cs, ok := s.(*CPUState)
		if !ok || cs == nil || cs.m != c.Model {
			return fmt.Errorf("qwen35: StepBatch: state %d (%T) is not a state of this model; make states with its NewState", i, s)
		}
		sts = append(sts, cs.State)
	}
	V, out := c.Config().VocabSize, logits
	if out == nil {
		out = blocks.Grow(&c.batchLogits, len(states)*V)
	}
	if err := c.Model.ForwardBatch(sts, ids, out); err != nil {
		return err
	}
	for i, s := range states {
		copy(s.(*CPUState).logits, out[i*V:(i+1)*V])
	}
	return nil
}

// CPUState is one sequence of a CPU model. Its last row of logits lives in
// host memory (model.HostLogits).
type CPUState struct {
	*State
	m      *Model
	logits []float32
}

// Forward implements model.State: one pass, in one piece (the runtime
// sizes passes by model.PassSizer).
func (s *CPUState) Forward(ids []int) error {
	return s.m.ForwardChunked(s.State, ids, s.logits, false, len(ids))
}

// Logits implements model.State.
func (s *CPUState) Logits(dst []float32) error {
	copy(dst, s.logits)
	return nil
}

// LastLogits implements model.HostLogits.
func (s *CPUState) LastLogits() []float32 { return s.logits }

// Argmax implements model.State: the lowest id among equal logits.
func (s *CPUState) Argmax() (int, error) {
	best := 0
	for i, v := range s.logits {
		if v > s.logits[best] {
			best = i
		}
	}
	return best, nil
}

// Close implements model.State: a CPU state is garbage-collected.
func (s *CPUState) Close() {}

// cpuSnapshot is a CPUState's copy: a State whose KV storage holds exactly
// the written tokens (a Clone would keep the whole capacity).
type cpuSnapshot struct {
	st    *State
	bytes int64
}

func (sn *cpuSnapshot) Len() int     { return sn.st.Len() }
func (sn *cpuSnapshot) Bytes() int64 { return sn.bytes }

// WriteTo serializes the snapshot (State.WriteTo).
func (sn *cpuSnapshot) WriteTo(w io.Writer) (int64, error) { return sn.st.WriteTo(w) }

// Snapshot implements model.Snapshotter.
func (s *CPUState) Snapshot() (model.Snapshot, error) {
	n, bits := s.State.Len(), s.KVBits()
	st := s.m.NewState(StateOptions{KVInitial: max(n, 1), MaxContext: s.State.MaxContext(), KVBits: bits})
	if err := st.CopyFrom(s.State); err != nil {
		return nil, err
	}
	return &cpuSnapshot{st: st, bytes: s.m.Config().StateBytesAt(max(n, 1), bits)}, nil
}

// Restore implements model.Snapshotter.
func (s *CPUState) Restore(sn model.Snapshot) error {
	c, ok := sn.(*cpuSnapshot)
	if !ok {
		return fmt.Errorf("qwen35: the snapshot does not come from a qwen35 CPU session")
	}
	return s.CopyFrom(c.st)
}

// ReadSnapshot implements model.SnapshotReader (Model.ReadState: the
// geometry, KV width and length must fit this state).
func (s *CPUState) ReadSnapshot(r io.Reader) (model.Snapshot, error) {
	st, err := s.m.ReadState(r, StateOptions{MaxContext: s.State.MaxContext(), KVBits: s.KVBits()})
	if err != nil {
		return nil, err
	}
	return &cpuSnapshot{st: st, bytes: s.m.Config().StateBytesAt(max(st.Len(), 1), st.KVBits())}, nil
}

// Footprint implements model.Footprinter for both architectures.
func Footprint(req model.FootprintRequest) (model.StateFootprint, error) {
	cfg, err := ConfigFor(req.Manifest.Architecture, req.Manifest.Geometry, req.RopeScaling, req.MaxContext)
	if err != nil {
		return model.StateFootprint{}, err
	}
	return FootprintOf(cfg, req)
}

// FootprintOf sizes a sequence of cfg by the rules NewState, the KV
// cache's growth and long passes apply (req.Manifest is not read).
func FootprintOf(cfg Config, req model.FootprintRequest) (model.StateFootprint, error) {
	bits := req.KVBits
	if bits == 0 {
		bits = DefaultKVBits
	}
	if !ValidKVBits(bits) {
		return model.StateFootprint{}, fmt.Errorf("KV cache width %d bits: use 8, 16 or 32", bits)
	}
	ctx := cfg.MaxContext // a larger MaxContext is lowered to it, as states lower it
	if req.MaxContext > 0 {
		ctx = min(req.MaxContext, cfg.MaxContext)
	}
	f := model.StateFootprint{KVBits: bits, MaxContext: ctx}
	// a pass is never longer than the context
	f.PassScratch = min(passScratch(req.StreamedExpertBytes), cfg.MixerScratchBytes()+cfg.ScratchBytesPerToken()*int64(ctx))
	full := 0
	for _, k := range cfg.Layers {
		if k == FullAttention {
			full++
		}
	}
	perToken := cfg.KVBytesPerToken(bits) * int64(full)
	f.KV = perToken * int64(ctx)
	f.KVGrowth = perToken * int64(blocks.PreviousKVCapacity(ctx))
	f.Recurrent = cfg.StateBytes(0)
	threads := req.Threads
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	f.Attention = int64(threads) * int64(cfg.NumHeads/cfg.NumKVHeads) * int64(ctx) * 4
	return f, nil
}
