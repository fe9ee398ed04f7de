package qwen38gpu

import (
	"fmt"
	"io"
	"os"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The GPU engine of qwen4_exp holds every weight in device memory, the
// routed experts too when the VRAM budget holds them (else they stream
// into VRAM slots from page-locked RAM, or host-planned from a RAM tier
// read from disk when RAM cannot hold them all: stream.go); the n-gram
// tables stay on disk.
func init() {
	model.Register(packexperts.ArchQwen4Exp, model.GPU, model.Entry{Load: Loader, Footprint: Footprint, HoldsExperts: true})
}

// Footprint implements model.Footprinter: the geometry, KV width and
// context are checked as the CPU engine checks them; the sequence's state
// lives in device memory, so the host keeps only the n-gram reader's
// buffers.
func Footprint(req model.FootprintRequest) (model.StateFootprint, error) {
	cpu, err := model.Lookup(packexperts.ArchQwen4Exp, model.CPU)
	if err != nil {
		return model.StateFootprint{}, err
	}
	f, err := cpu.Footprint(req)
	if err != nil {
		return f, err
	}
	return model.StateFootprint{KVBits: f.KVBits, MaxContext: f.MaxContext, ReadBuffers: f.ReadBuffers}, nil
}

// Backend is the qwen4_exp GPU engine as a model.Model.
type Backend struct {
	Dev    *cuda.Device
	Model  *Model
	tables io.Closer
	last   *State // the latest state, for the tests
}

// Loader opens GPU 0, the install's n-gram tables (host side) and uploads
// the weights. The geometry is checked first, so a model the engine cannot
// run is refused without a device.
func Loader(req model.Request) (model.Model, error) {
	if req.RopeScaling != "" && req.RopeScaling != model.RopeNone {
		return nil, fmt.Errorf("%s: rope scaling %q is not supported for qwen4_exp installs yet", req.Dir, req.RopeScaling)
	}
	cfg, err := qwen38.ConfigFromGeometry(req.Manifest.Geometry)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.Dir, err)
	}
	for k, en := range req.Manifest.NGram {
		if k < len(cfg.PLELayers) {
			if err := qwen38.NewNgramHasher(cfg, k).CheckConstants(fmt.Sprintf("%s: manifest ngram[%d]", req.Dir, k), en.Multipliers, en.VocabSizes, en.Offsets); err != nil {
				return nil, err
			}
		}
	}
	b := &Backend{}
	var ngrams qwen38.NgramTable
	if len(cfg.PLELayers) > 0 {
		t, err := runtime.OpenNgramTables(req.Dir, req.Manifest, cfg)
		if err != nil {
			return nil, err
		}
		ngrams, b.tables = t, t
	}
	if b.Dev, err = cuda.Open(0); err != nil {
		b.closeTables()
		return nil, fmt.Errorf("--engine gpu: %w", err)
	}
	b.Model, err = Load(b.Dev, cfg, req.Weights, req.Dir, req.Manifest.Experts, ngrams, LoadOptions{VRAMBudget: req.VRAMBudget, RAMBudget: req.RAMBudget, MaxContext: req.MaxContext, KVBits: req.KVBits, Log: os.Stderr})
	if err != nil {
		b.Dev.Close()
		b.closeTables()
		return nil, fmt.Errorf("--engine gpu: %w", err)
	}
	return b, nil
}

func (b *Backend) closeTables() {
	if b.tables != nil {
		b.tables.Close()
	}
}

// Info implements model.Model.
func (b *Backend) Info() model.Info {
	c := b.Model.Config()
	return devshared.Info(b.Dev, packexperts.ArchQwen4Exp, c.VocabSize, c.MaxContext)
}

// NewState starts a sequence; a zero KVBits is model.DefaultKVBits, as on
// the CPU engine.
func (b *Backend) NewState(opt model.StateOptions) (model.State, error) {
	bits, err := devshared.SessionKVBits("qwen38gpu", opt.KVBits)
	if err != nil {
		return nil, err
	}
	st, err := b.Model.NewState(StateOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: bits})
	if err != nil {
		return nil, err
	}
	b.last = st
	return st, nil
}

// PassLength implements model.PassSizer: a prompt runs in passes of the
// engine's chunk.
func (b *Backend) PassLength(int) int { return b.Model.chunk }

// StateBytes implements model.StateSizer: what a sequence holds in VRAM
// besides its scratch (KV, indexer keys, GDN and PLE state).
func (b *Backend) StateBytes(tokens, kvBits int) int64 {
	c := b.Model.Config()
	return c.KVBytes(tokens, kvBits) + c.FixedStateBytes()
}

// Close frees the weights, the device and the n-gram tables.
func (b *Backend) Close() {
	b.Model.Close()
	b.Dev.Close()
	b.closeTables()
}

var (
	_ model.State          = (*State)(nil)
	_ model.Sampler        = (*State)(nil)
	_ model.KVWidth        = (*State)(nil)
	_ model.RouteOverrider = (*State)(nil)
)
