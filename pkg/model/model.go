// Package model is the engine surface: what a loaded model is to the
// runtime, whatever its architecture and whatever device runs it. A Model
// makes States; a State is one sequence, fed a pass of tokens at a time,
// whose last row of logits the runtime samples from. What only some
// engines can do (sample on the device, name their pass length, copy or
// serialize a state, profile decode steps) is an optional interface the
// runtime checks once, when a session starts.
//
// Architectures register a Loader per (architecture, device) pair
// (registry.go); the runtime looks them up by the install's architecture
// and the device asked for. The expert contract the expert cache serves
// is here too (experts.go).
//
// This package names no type of the runtime or of any architecture: it
// sits below both (internal/archtest checks the imports).
package model

import (
	"io"

	"github.com/nvmai/nvmai/pkg/sample"
)

// Devices a model runs on. A device is a name in the registry; these are
// the ones this module registers.
const (
	CPU = "cpu"
	GPU = "gpu"
)

// KV cache widths in bits (docs/kv-cache.md). The recurrent state of
// linear-attention layers is float32 whatever the width.
const (
	KVFloat32 = 32 // float32, the reference
	KVBF16    = 16 // bfloat16
	KVInt8    = 8  // int8 with a float32 scale per group of values
)

// DefaultKVBits is the width the runtime and the CLIs use unless told
// otherwise.
const DefaultKVBits = KVInt8

// ValidKVBits reports whether bits is a KV width some engine supports.
func ValidKVBits(bits int) bool { return bits == KVFloat32 || bits == KVBF16 || bits == KVInt8 }

// Rotary scaling names (the --rope-scaling flag's values).
const (
	RopeNone = "none"
	RopeYaRN = "yarn"
)

// RopeScaling is the rotary scaling a model runs with (zero: plain RoPE).
// Its printed form (%+v) is part of the prompt cache's disk key, so its
// fields and their order are those of the architecture's own record.
type RopeScaling struct {
	Type                string  // "" (plain RoPE) or "yarn"
	Factor              float64 // context extension factor
	OriginalMaxPosition int     // the trained context the ramp is measured against
	BetaFast, BetaSlow  float64 // 0 means the defaults, 32 and 1
	AttentionFactor     float64 // 0 means 0.1·ln(Factor) + 1
	NoTruncate          bool    // keep the correction range fractional
}

// Info describes a loaded model.
type Info struct {
	Name         string // for reports: "cpu", "gpu (NVIDIA H200, sm_90)"
	Architecture string // the install's architecture (packexperts.Arch*)
	Device       string // CPU or GPU
	VocabSize    int    // the length of a row of logits
	MaxContext   int    // the most tokens a State may hold (YaRN's extended context when applied)
	RopeScaling  RopeScaling
}

// Model is a loaded model. NewState may be called again after the States
// it made are closed; Close frees the model once every State is closed.
type Model interface {
	Info() Info
	NewState(opt StateOptions) (State, error)
	Close()
}

// StateOptions size a State. Zero fields take the model's defaults.
type StateOptions struct {
	KVInitial  int // tokens of KV storage allocated up front
	MaxContext int // most tokens the State may hold; more than the model's is lowered to it
	KVBits     int // KV cache width (KVInt8, KVBF16, KVFloat32); 0: DefaultKVBits where the engine has a choice
}

// State is one sequence. It is not safe for concurrent use.
type State interface {
	Len() int        // tokens fed so far
	MaxContext() int // the most it may hold
	// Forward feeds ids (one pass) after what the State holds; afterwards
	// the last token's logits are ready for Logits, Argmax or a Sampler.
	Forward(ids []int) error
	Logits(dst []float32) error // copies the last row into dst (VocabSize values)
	Argmax() (int, error)       // the greedy pick of the last row, the lowest id among equals
	Close()                     // frees device memory; a CPU State needs nothing
}

// HostLogits is a State whose last row of logits lives in host memory:
// the runtime reads (and masks) it in place instead of copying it. The
// row is valid until the next Forward.
type HostLogits interface {
	LastLogits() []float32
}

// Resetter is a State that can empty itself keeping its storage; a State
// without it is closed and made again.
type Resetter interface {
	Reset()
}

// Sampler is a State that samples where its logits are: Sample picks st's
// token from the last row exactly as sample.Sampler.Finish would
// (history: the tokens so far, for the penalties), so only the id comes
// back. ok false means the row must be copied instead (a NaN or +Inf in
// it, or a nucleus longer than the engine takes).
type Sampler interface {
	Sample(st sample.Step, history []int32) (id int, ok bool, err error)
}

// PassSizer is a Model that names the prompt tokens a Forward pass should
// carry for a prompt of tokens tokens (its scratch budget, or a device's
// fixed chunk). Without it the runtime feeds passes of DefaultPass.
type PassSizer interface {
	PassLength(tokens int) int
}

// DefaultPass is the pass length for a Model that is no PassSizer.
const DefaultPass = 256

// Snapshot is a copy of a State at one position.
type Snapshot interface {
	Len() int     // tokens it holds
	Bytes() int64 // the memory it occupies
}

// Snapshotter is a State that can be copied and restored: the prompt
// cache resumes a conversation from a copy taken exactly where it resumes
// (recurrent state summarises every token and cannot be truncated).
// Restore takes a Snapshot from a State of the same Model; it refuses one
// that does not fit this State's context.
type Snapshotter interface {
	Snapshot() (Snapshot, error)
	Restore(sn Snapshot) error
}

// SnapshotReader is a Snapshotter whose snapshots also go to disk: each
// implements io.WriterTo, and ReadSnapshot reads one back, refusing one
// whose geometry, KV width or length does not fit this State. The bytes
// are the architecture's own (the runtime frames them).
type SnapshotReader interface {
	ReadSnapshot(r io.Reader) (Snapshot, error)
}

// Profiler is a State that times its decode steps phase by phase into p
// (nil stops it).
type Profiler interface {
	SetStepProfile(p *StepProfile)
}

// KVWidth is a State that reports its KV cache width in bits.
type KVWidth interface {
	KVBits() int
}

// SyntheticFiller is a State that can be filled with n positions of
// synthetic state (seeded), so a benchmark decodes at a long context
// without prefilling it.
type SyntheticFiller interface {
	FillSynthetic(n int, seed uint64) error
}

// StateSizer is a Model that knows the bytes of sequence state a decode
// step reads at a length of tokens with a KV cache of kvBits.
type StateSizer interface {
	StateBytes(tokens, kvBits int) int64
}

// BatchStepper is a Model that decodes one token for each of several of
// its States in one step: states[i] is fed ids[i] at its own position, so
// the weights are read once for the batch (each routed expert once for
// every state that picked it). The states must be distinct States of this
// Model; StepBatch refuses anything else, and every bad argument, before
// changing any state.
//
// The contract is bitwise: afterwards each state's logits (Logits, Argmax,
// a Sampler) and its sequence are exactly those of states[i].Forward(
// ids[i:i+1]), whatever the other states, their number and their order,
// so a sequence's output never depends on the batch it lands in. logits,
// when non-nil, also receives [len(states), VocabSize], row i states[i]'s.
// If a step fails half-way, every state of the batch refuses further work
// until it is reset or restored, as after a failed Forward.
type BatchStepper interface {
	StepBatch(states []State, ids []int, logits []float32) error
}
