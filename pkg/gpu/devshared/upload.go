package devshared

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// Weights is what the uploader reads tensors from.
type Weights interface {
	Matrix(name string) (*kernels.Matrix, error)
	Vector(name string) ([]float32, error)
}

// Uploader copies tensors to the device, remembering the first error; each
// allocation is appended to *Allocs (the model frees them) and counted in
// *WeightBytes.
type Uploader struct {
	C           *cuda.Ctx
	W           Weights
	Err         error
	Engine      string // prefixes the errors: "gpu", "qwen38gpu"
	Allocs      *[]cuda.DevicePtr
	WeightBytes *int64
	// Matrices, when set, is told the bytes of each matrix Matrix uploads
	// (pkg/gpu counts a decode step's reads by phase).
	Matrices func(n int64)
}

// Bytes copies b into new device memory (0 for an empty b).
func (u *Uploader) Bytes(b []byte) cuda.DevicePtr {
	if u.Err != nil || len(b) == 0 {
		return 0
	}
	p, err := u.C.AllocCopy(b)
	if err != nil {
		u.Err = fmt.Errorf("%s: uploading weights: %w", u.Engine, err)
		return 0
	}
	*u.Allocs = append(*u.Allocs, p)
	*u.WeightBytes += int64(len(b))
	return p
}

// Floats copies v into new device memory.
func (u *Uploader) Floats(v []float32) cuda.DevicePtr { return u.Bytes(cuda.Bytes(v)) }

// Matrix uploads the [rows, cols] matrix name in its encoding.
func (u *Uploader) Matrix(name string, rows, cols int) *gpukernels.Mat {
	if u.Err != nil {
		return nil
	}
	km, err := u.W.Matrix(name)
	if err == nil {
		err = blocks.CheckMatrix(km, rows, cols)
	}
	if err != nil {
		u.Err = fmt.Errorf("%s: tensor %s: %w", u.Engine, name, err)
		return nil
	}
	mat := &gpukernels.Mat{Rows: rows, Cols: cols, Enc: km.Enc, Data: u.Bytes(km.Data), Scales: u.Bytes(km.Scales), Biases: u.Bytes(km.Biases)}
	if u.Matrices != nil {
		u.Matrices(int64(len(km.Data) + len(km.Scales) + len(km.Biases)))
	}
	return mat
}

// Stacked uploads matrices of one encoding and width as one, rows of the
// first then of the second …; nil (and nothing uploaded) when they differ.
func (u *Uploader) Stacked(names []string, rows []int, cols int) *gpukernels.Mat {
	if u.Err != nil {
		return nil
	}
	var data, scales, biases []byte
	var enc kernels.Encoding
	total := 0
	for i, name := range names {
		km, err := u.W.Matrix(name)
		if err != nil || km.Rows != rows[i] || km.Cols != cols || km.Validate() != nil {
			return nil // the one-by-one path reports it
		}
		if i == 0 {
			enc = km.Enc
		} else if km.Enc != enc {
			return nil
		}
		data, scales, biases = append(data, km.Data...), append(scales, km.Scales...), append(biases, km.Biases...)
		total += rows[i]
	}
	return &gpukernels.Mat{Rows: total, Cols: cols, Enc: enc, Data: u.Bytes(data), Scales: u.Bytes(scales), Biases: u.Bytes(biases)}
}

// Vector uploads an n-value parameter, as 1 + w (rounded to float32) when
// onePlus (blocks.OnePlus).
func (u *Uploader) Vector(name string, n int, onePlus bool) cuda.DevicePtr {
	if u.Err != nil {
		return 0
	}
	v, err := u.W.Vector(name)
	if err == nil && len(v) != n {
		err = fmt.Errorf("%d values, the geometry needs %d; the install does not match its manifest geometry", len(v), n)
	}
	if err != nil {
		u.Err = fmt.Errorf("%s: tensor %s: %w", u.Engine, name, err)
		return 0
	}
	if onePlus {
		v = blocks.OnePlus(v)
	}
	return u.Bytes(cuda.Bytes(v))
}

// File copies a file of exactly size bytes into new device memory through
// buf (u.Err is neither read nor set).
func (u *Uploader) File(path string, size int64, buf []byte) (cuda.DevicePtr, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u.Engine, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != size {
		return 0, fmt.Errorf("%s: %s should be %d bytes; run nvmai-verify --verify-install on the install", u.Engine, path, size)
	}
	p, err := u.C.Alloc(uint64(size))
	if err != nil {
		return 0, fmt.Errorf("%s: no room for the experts of %s (%d MiB): %w", u.Engine, filepath.Base(path), size>>20, err)
	}
	*u.Allocs = append(*u.Allocs, p)
	*u.WeightBytes += size
	for off := int64(0); off < size; {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return 0, fmt.Errorf("%s: reading %s at %d: %w", u.Engine, path, off, err)
		}
		if err := u.C.HtoD(p+cuda.DevicePtr(off), buf[:n]); err != nil {
			return 0, err
		}
		off += int64(n)
	}
	return p, nil
}
