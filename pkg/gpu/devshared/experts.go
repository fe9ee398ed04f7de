package devshared

import (
	"fmt"
	"path/filepath"
	"unsafe"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Experts is the layout of an install's routed experts: each layer's file
// holds Count records of Stride bytes, and Gate, Up and Down are views of
// one record's parts.
type Experts struct {
	Gate, Up, Down *kernels.Matrix
	ByLayer        map[int]string // the expert file of each layer
	ex             *packexperts.Experts
	rec            []byte
}

// ExpertLayout checks the manifest's experts against the geometry (E
// experts, top-k) and lays out one record; engine prefixes the errors.
func ExpertLayout(engine string, ex *packexperts.Experts, E, k int) (*Experts, error) {
	if ex.Count != E || ex.TopK != k {
		return nil, fmt.Errorf("%s: the manifest's experts are %d top-%d, the geometry says %d top-%d", engine, ex.Count, ex.TopK, E, k)
	}
	x := &Experts{ex: ex, rec: make([]byte, ex.Stride), ByLayer: map[int]string{}}
	var err error
	x.Gate, x.Up, x.Down, err = packexperts.ExpertViews(x.rec, ex.Parts)
	if err != nil {
		return nil, err
	}
	for _, mt := range []*kernels.Matrix{x.Gate, x.Up, x.Down} {
		if err := mt.Validate(); err != nil {
			return nil, fmt.Errorf("%s: expert record: %w", engine, err)
		}
	}
	for _, l := range ex.Layers {
		x.ByLayer[l.Layer] = l.File
	}
	return x, nil
}

// Offsets gives a part's data, scales and biases offsets in a record.
func (x *Experts) Offsets(mt *kernels.Matrix) (d, s, b int64) {
	base := uintptr(unsafe.Pointer(&x.rec[0]))
	off := func(p []byte) int64 {
		if len(p) == 0 {
			return 0
		}
		return int64(uintptr(unsafe.Pointer(&p[0])) - base)
	}
	return off(mt.Data), off(mt.Scales), off(mt.Biases)
}

// Resident copies each of the first layers' expert files whole into one
// device buffer (u.File, in layer order) and gives set the layer's gate,
// up and down over it: expert e's matrices sit e·Stride after expert 0's,
// which is what the gathered products index with the ids route wrote.
func (x *Experts) Resident(u *Uploader, dir string, layers int, set func(layer int, gate, up, down *gpukernels.Mat)) error {
	size := int64(x.ex.Count) * x.ex.Stride
	buf := make([]byte, min(size, 256<<20))
	for i := range layers {
		file, ok := x.ByLayer[i]
		if !ok {
			return fmt.Errorf("%s: the manifest lists no expert file for layer %d", u.Engine, i)
		}
		base, err := u.File(filepath.Join(dir, file), size, buf)
		if err != nil {
			return err
		}
		mats, err := x.Mats(u.Engine, base)
		if err != nil {
			return err
		}
		set(i, mats[0], mats[1], mats[2])
	}
	return nil
}

// Mats is the gate, up and down matrices of the expert records laid one
// after another from base (a layer's resident buffer, a slot pool or a
// staging buffer): expert e's sit e·Stride after expert 0's.
func (x *Experts) Mats(engine string, base cuda.DevicePtr) ([3]*gpukernels.Mat, error) {
	var mats [3]*gpukernels.Mat
	for j, mt := range []*kernels.Matrix{x.Gate, x.Up, x.Down} {
		d, s, b := x.Offsets(mt)
		if d%16 != 0 || x.ex.Stride%16 != 0 {
			return mats, fmt.Errorf("%s: expert part at offset %d (stride %d) is not 16-byte aligned", engine, d, x.ex.Stride)
		}
		mat := &gpukernels.Mat{Rows: mt.Rows, Cols: mt.Cols, Enc: mt.Enc, Data: base + cuda.DevicePtr(d), EData: x.ex.Stride, EScale: x.ex.Stride}
		if mt.Enc == kernels.Q4 || mt.Enc == kernels.Q8 {
			mat.Scales, mat.Biases = base+cuda.DevicePtr(s), base+cuda.DevicePtr(b)
		}
		mats[j] = mat
	}
	return mats, nil
}

// Stride is the bytes of one expert record.
func (x *Experts) Stride() int64 { return x.ex.Stride }
