package packexperts

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/limits"
)

// Encoding is the storage chosen for one tensor in an install.
type Encoding struct {
	DType string // DTypeU32 for quantized, else a float dtype
	Bits  int    // 4 or 8 when quantized; 16 for BF16/F16; 32 for F32
}

// Common encodings.
var (
	EncF32  = Encoding{DTypeF32, 32}
	EncBF16 = Encoding{DTypeBF16, 16}
	EncQ4   = Encoding{DTypeU32, 4}
	EncQ8   = Encoding{DTypeU32, 8}
)

// Quantized reports whether e is an MLX affine packed encoding.
func (e Encoding) Quantized() bool { return e.DType == DTypeU32 }

// QuantEncoding returns the packed encoding for bits (4 or 8).
func QuantEncoding(bits int) Encoding { return Encoding{DTypeU32, bits} }

// TensorBytes returns the byte lengths of a tensor's weights and, when
// quantized, of each of its scales and biases. Overflow is an error, since
// shapes come from untrusted manifests.
func TensorBytes(enc Encoding, shape []int64) (weights, scales int64, err error) {
	elems := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && elems > (1<<62)/d) {
			return 0, 0, fmt.Errorf("shape %v overflows", shape)
		}
		elems *= d
	}
	switch enc.DType {
	case DTypeF32:
		return elems * 4, 0, nil
	case DTypeBF16, DTypeF16:
		return elems * 2, 0, nil
	case DTypeU32:
		if enc.Bits != 4 && enc.Bits != 8 {
			return 0, 0, fmt.Errorf("quantized width %d is not 4 or 8", enc.Bits)
		}
		if len(shape) != 2 || shape[1]%limits.QuantGroupSize != 0 {
			return 0, 0, fmt.Errorf("quantized shape %v is not [rows, cols] with cols a multiple of %d", shape, limits.QuantGroupSize)
		}
		return elems * int64(enc.Bits) / 8, elems / limits.QuantGroupSize * 2, nil
	}
	return 0, 0, fmt.Errorf("unknown dtype %q", enc.DType)
}

// Allocator hands out aligned, non-overlapping ranges of one file in order.
type Allocator struct {
	File  string
	Align int64
	Size  int64
}

// Take reserves n bytes and returns their offset.
func (a *Allocator) Take(n int64) int64 {
	if a.Align > 1 {
		a.Size = (a.Size + a.Align - 1) / a.Align * a.Align
	}
	off := a.Size
	a.Size += n
	return off
}

// Place fills t's Offset/Length (and Scales/Biases when quantized) with ranges
// taken from a, for encoding enc and t.Shape.
func (a *Allocator) Place(t *Tensor, enc Encoding) error {
	w, s, err := TensorBytes(enc, t.Shape)
	if err != nil {
		return fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	t.DType, t.Bits, t.File = enc.DType, enc.Bits, a.File
	t.Offset, t.Length = a.Take(w), w
	t.GroupSize, t.Scales, t.Biases = 0, nil, nil
	if enc.Quantized() {
		t.GroupSize = limits.QuantGroupSize
		t.Scales = &Range{a.Take(s), s}
		t.Biases = &Range{a.Take(s), s}
	}
	return nil
}

// ExpertPartNames are the three matrices of a routed expert, in file order.
var ExpertPartNames = [3]string{"gate", "up", "down"}

// LayoutExperts returns the parts of one expert (gate [I,H], up [I,H],
// down [H,I]; each weights then scales then biases, contiguous) and the
// stride, rounded up to limits.DirectIOAlign so every expert can be read with
// direct I/O. A part whose columns are not a multiple of the quantization
// group (the tiny qwen3.8 fixture's down [64, 32]) is BF16 in a quantized
// install, as the resident rule does for such matrices.
func LayoutExperts(hidden, inter int, enc Encoding) (parts []Tensor, stride int64, err error) {
	shapes := [3][]int64{{int64(inter), int64(hidden)}, {int64(inter), int64(hidden)}, {int64(hidden), int64(inter)}}
	a := Allocator{}
	for i, name := range ExpertPartNames {
		t := Tensor{Name: name, Shape: shapes[i]}
		partEnc := enc
		if enc.Quantized() && shapes[i][1]%limits.QuantGroupSize != 0 {
			partEnc = EncBF16
		}
		if err := a.Place(&t, partEnc); err != nil {
			return nil, 0, err
		}
		t.File = ""
		parts = append(parts, t)
	}
	stride = (a.Size + limits.DirectIOAlign - 1) / limits.DirectIOAlign * limits.DirectIOAlign
	return parts, stride, nil
}

// ExpertFileName is the packed expert file of a layer, relative to the install.
func ExpertFileName(layer int) string { return fmt.Sprintf("%s/layer-%03d.bin", ExpertDir, layer) }
