package model

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Weights gives a model's resident tensors by canonical name (the Hugging
// Face name with "model.language_model." rewritten to "model."). The model
// never learns whether they live in RAM, in a mapped file or elsewhere.
type Weights interface {
	// Matrix returns a linear weight [out, in] in any kernels encoding.
	Matrix(name string) (*kernels.Matrix, error)
	// Vector returns a 1-D parameter widened to float32, flattened.
	Vector(name string) ([]float32, error)
	// Has reports whether name exists.
	Has(name string) bool
}

// Request is what a Loader builds a model from: an opened install and the
// runtime's choices.
type Request struct {
	Dir      string
	Manifest *packexperts.Manifest
	Weights  Weights
	// Experts serves the routed experts (nil for a dense model, and for an
	// engine that holds them itself).
	Experts Experts
	Pool    *kernels.Pool // the CPU's compute threads
	// RopeScaling "" or RopeNone keeps the model's own; RopeYaRN extends
	// its context to MaxContext (2x or 4x; 0 = 4x).
	RopeScaling string
	MaxContext  int
	// StreamedExpertBytes is the expert slots' bytes when they hold fewer
	// than every expert (experts stream from disk), else 0: long passes
	// then budget their scratch by it.
	StreamedExpertBytes int64
	// VRAMBudget is the device memory a GPU engine may take (--vram-budget;
	// 0: auto), RAMBudget the host memory for expert slots (--ram-budget;
	// 0: not set). Engines that hold no experts in device memory ignore
	// them.
	VRAMBudget, RAMBudget int64
	// KVBits is the sessions' KV width (--kv-bits; 0: DefaultKVBits), for
	// an engine that plans its device memory at load (the GPU engine).
	// Each State still takes its own width from StateOptions.KVBits.
	KVBits int
}

// FootprintRequest is what sizes a process's sequence state.
type FootprintRequest struct {
	Manifest            *packexperts.Manifest
	KVBits              int    // 0 = DefaultKVBits
	MaxContext          int    // tokens the KV cache may grow to; 0 or more than the model's = the model's maximum
	RopeScaling         string // as Request.RopeScaling
	Threads             int    // compute threads; each holds its own attention scores
	StreamedExpertBytes int64  // as Request.StreamedExpertBytes
	IOThreads           int    // the expert cache's readers (0 = its default)
}

// StateFootprint is the memory a model's one sequence of MaxContext tokens
// and its passes hold at most, in bytes (the weights and expert slots are
// the runtime's to count).
type StateFootprint struct {
	KV         int64 // K and V of every attention layer for MaxContext tokens
	KVGrowth   int64 // the previous KV capacity, held while the last growth copies it
	KVBits     int
	MaxContext int
	Recurrent  int64 // linear-attention conv windows and recurrent matrices
	Attention  int64 // attention scores of every thread at MaxContext
	// PassScratch bounds a long prefill pass's activations.
	PassScratch int64
	// ReadBuffers is what readers of side tables hold (qwen38's n-gram
	// tables: one pass's rows and aligned page buffers).
	ReadBuffers int64
}

// Loader builds a model for one (architecture, device) pair.
type Loader func(Request) (Model, error)

// Footprinter sizes a model's sequence state without loading it.
type Footprinter func(FootprintRequest) (StateFootprint, error)

// Entry is what an (architecture, device) pair registers.
type Entry struct {
	Load      Loader
	Footprint Footprinter
	// HoldsExperts says the engine loads the routed experts itself (into
	// device memory): the runtime opens no expert cache for it.
	HoldsExperts bool
}

type key struct{ arch, device string }

var registry struct {
	sync.RWMutex
	m map[key]Entry
}

// Register makes entry the engine of arch on device. Architectures call it
// from init; registering a pair twice panics (two packages claim it).
func Register(arch, device string, entry Entry) {
	if entry.Load == nil || entry.Footprint == nil {
		panic(fmt.Sprintf("model: Register(%q, %q) without a Loader and a Footprinter", arch, device))
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.m == nil {
		registry.m = map[key]Entry{}
	}
	k := key{arch, device}
	if _, dup := registry.m[k]; dup {
		panic(fmt.Sprintf("model: %s on %s registered twice", arch, device))
	}
	registry.m[k] = entry
}

// Lookup returns the engine of arch on device, or an error naming what
// this build can run.
func Lookup(arch, device string) (Entry, error) {
	registry.RLock()
	defer registry.RUnlock()
	if e, ok := registry.m[key{arch, device}]; ok {
		return e, nil
	}
	var on []string
	for k := range registry.m {
		if k.arch == arch {
			on = append(on, k.device)
		}
	}
	if len(on) > 0 {
		slices.Sort(on)
		return Entry{}, fmt.Errorf("the %s architecture does not run on the %s engine; use --engine %s", arch, device, strings.Join(on, " or "))
	}
	if !slices.Contains(devicesLocked(), device) {
		return Entry{}, fmt.Errorf("no %s engine in this build (engines: %s)", device, strings.Join(devicesLocked(), ", "))
	}
	return Entry{}, fmt.Errorf("architecture %q is not supported by this build", arch)
}

// Devices lists the devices something is registered on, sorted.
func Devices() []string {
	registry.RLock()
	defer registry.RUnlock()
	return devicesLocked()
}

func devicesLocked() []string {
	var out []string
	for k := range registry.m {
		if !slices.Contains(out, k.device) {
			out = append(out, k.device)
		}
	}
	slices.Sort(out)
	return out
}
