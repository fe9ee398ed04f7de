// Package hfsnap serves a Hugging Face fixture snapshot to the model
// packages' tests straight from its safetensors files: float matrices as
// stored, vectors widened, int64 tensors decoded, and experts sliced out of
// the fused [E, 2I, H] / [E, H, I] tensors or read from the per-expert ones.
// It is apart from package testfix so that testfix stays free of the
// kernels and safetensors packages (whose own tests use testfix).
package hfsnap

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// Tensor is one tensor of a snapshot held in memory.
type Tensor struct {
	DType safetensors.DType
	Shape []int64
	Data  []byte
}

// Snapshot is the tensors of one snapshot by their Hugging Face names.
// Its methods are those of the model packages' Weights, Int64Weights and
// Experts (less Acquire, which each test wraps in its own bookkeeping).
type Snapshot struct {
	Tensors map[string]Tensor
}

var cache sync.Map // dir → map[string]Tensor

// Load reads every *.safetensors file of dir into memory, once per test
// binary; each call returns a Snapshot of its own over the shared tensors.
func Load(t testing.TB, dir string) *Snapshot {
	t.Helper()
	if v, ok := cache.Load(dir); ok {
		return &Snapshot{Tensors: v.(map[string]Tensor)}
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no safetensors shards in %s (%v)", dir, err)
	}
	tensors := map[string]Tensor{}
	for _, p := range paths {
		for name, tn := range ReadFile(t, p) {
			tensors[name] = tn
		}
	}
	cache.Store(dir, tensors)
	return &Snapshot{Tensors: tensors}
}

// ReadFile reads every tensor of one safetensors file.
func ReadFile(t testing.TB, path string) map[string]Tensor {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]Tensor{}
	for _, ti := range f.Header().Tensors {
		buf := make([]byte, ti.Size())
		if err := f.ReadTensor(ti, buf); err != nil {
			t.Fatal(err)
		}
		out[ti.Name] = Tensor{DType: ti.DType, Shape: ti.Shape, Data: buf}
	}
	return out
}

// HFName maps a canonical name back to the checkpoint's.
func HFName(canonical string) string {
	if rest, ok := strings.CutPrefix(canonical, "model."); ok {
		return "model.language_model." + rest
	}
	return canonical
}

// Has reports whether the snapshot holds the canonical name.
func (s *Snapshot) Has(name string) bool {
	_, ok := s.Tensors[HFName(name)]
	return ok
}

// Tensor returns the tensor of a canonical name.
func (s *Snapshot) Tensor(name string) (Tensor, error) {
	rt, ok := s.Tensors[HFName(name)]
	if !ok {
		return Tensor{}, fmt.Errorf("not in the snapshot (as %s)", HFName(name))
	}
	return rt, nil
}

// Matrix returns a 2-D float tensor as stored.
func (s *Snapshot) Matrix(name string) (*kernels.Matrix, error) {
	rt, err := s.Tensor(name)
	if err != nil {
		return nil, err
	}
	if len(rt.Shape) != 2 {
		return nil, fmt.Errorf("shape %v is not 2-D", rt.Shape)
	}
	return MatrixOf(rt.DType, int(rt.Shape[0]), int(rt.Shape[1]), rt.Data)
}

// MatrixOf wraps BF16, F16 or F32 bytes as a rows × cols matrix.
func MatrixOf(dt safetensors.DType, rows, cols int, data []byte) (*kernels.Matrix, error) {
	enc := map[safetensors.DType]kernels.Encoding{safetensors.BF16: kernels.BF16, safetensors.F16: kernels.F16, safetensors.F32: kernels.F32}
	e, ok := enc[dt]
	if !ok {
		return nil, fmt.Errorf("dtype %s is not a float matrix", dt)
	}
	return &kernels.Matrix{Rows: rows, Cols: cols, Enc: e, Data: data}, nil
}

// Vector returns a tensor widened to float32.
func (s *Snapshot) Vector(name string) ([]float32, error) {
	rt, err := s.Tensor(name)
	if err != nil {
		return nil, err
	}
	return Widen(rt.DType, rt.Data)
}

// Int64s returns an I64 tensor.
func (s *Snapshot) Int64s(name string) ([]int64, error) {
	rt, err := s.Tensor(name)
	if err != nil {
		return nil, err
	}
	if rt.DType != safetensors.I64 {
		return nil, fmt.Errorf("dtype %s, want I64", rt.DType)
	}
	out := make([]int64, len(rt.Data)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(rt.Data[8*i:]))
	}
	return out, nil
}

// Widen decodes BF16 or F32 little-endian bytes.
func Widen(dt safetensors.DType, b []byte) ([]float32, error) {
	switch dt {
	case safetensors.BF16:
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return out, nil
	case safetensors.F32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("dtype %s cannot be widened", dt)
}

// Experts returns the matrices of experts ids of layer (Expert each), for
// a test's Experts.Acquire.
func (s *Snapshot) Experts(layer int, ids []int) ([]model.ExpertMats, error) {
	mats := make([]model.ExpertMats, len(ids))
	for i, e := range ids {
		em, err := s.Expert(layer, e)
		if err != nil {
			return nil, err
		}
		mats[i] = em
	}
	return mats, nil
}

// Expert slices expert e of layer out of the fused tensors (docs §2.3:
// gate rows [0, I), up rows [I, 2I), no transpose), or reads the
// per-expert tensors when the snapshot has those.
func (s *Snapshot) Expert(layer, e int) (model.ExpertMats, error) {
	prefix := fmt.Sprintf("model.language_model.layers.%d.mlp.experts.", layer)
	gu, fused := s.Tensors[prefix+"gate_up_proj"]
	if !fused {
		var em model.ExpertMats
		for _, p := range []struct {
			dst  **kernels.Matrix
			name string
		}{{&em.Gate, "gate_proj"}, {&em.Up, "up_proj"}, {&em.Down, "down_proj"}} {
			m, err := s.Matrix(fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.weight", layer, e, p.name))
			if err != nil {
				return model.ExpertMats{}, fmt.Errorf("expert %d %s: %w", e, p.name, err)
			}
			*p.dst = m
		}
		return em, nil
	}
	down := s.Tensors[prefix+"down_proj"]
	E, twoI, H := int(gu.Shape[0]), int(gu.Shape[1]), int(gu.Shape[2])
	if e < 0 || e >= E {
		return model.ExpertMats{}, fmt.Errorf("expert %d of %d", e, E)
	}
	I := twoI / 2
	es := 2 // bytes per BF16 element
	base := e * twoI * H * es
	gate, _ := MatrixOf(gu.DType, I, H, gu.Data[base:base+I*H*es])
	up, _ := MatrixOf(gu.DType, I, H, gu.Data[base+I*H*es:base+2*I*H*es])
	db := e * H * I * es
	dn, _ := MatrixOf(down.DType, H, I, down.Data[db:db+H*I*es])
	return model.ExpertMats{Gate: gate, Up: up, Down: dn}, nil
}
