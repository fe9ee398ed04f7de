package packexperts

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// MatrixView views tensor t, whose offsets are relative to data[0], as a
// kernels.Matrix without copying. The ranges are checked against data, since
// they come from a manifest on disk.
func MatrixView(data []byte, t *Tensor) (*kernels.Matrix, error) {
	enc, err := KernelEncoding(t)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("tensor %s: shape %v is not a matrix", t.Name, t.Shape)
	}
	m := &kernels.Matrix{Rows: int(t.Shape[0]), Cols: int(t.Shape[1]), Enc: enc}
	if m.Data, err = span(data, t.Offset, t.Length, t.Name); err != nil {
		return nil, err
	}
	if t.Scales != nil && t.Biases != nil {
		if m.Scales, err = span(data, t.Scales.Offset, t.Scales.Length, t.Name); err != nil {
			return nil, err
		}
		if m.Biases, err = span(data, t.Biases.Offset, t.Biases.Length, t.Name); err != nil {
			return nil, err
		}
	}
	return m, m.Validate()
}

// ExpertViews views one expert record (Experts.Stride bytes) as its gate, up
// and down matrices.
func ExpertViews(record []byte, parts []Tensor) (gate, up, down *kernels.Matrix, err error) {
	var m [3]*kernels.Matrix
	if len(parts) != len(m) {
		return nil, nil, nil, fmt.Errorf("expert record has %d parts, want gate, up, down", len(parts))
	}
	for i := range parts {
		if m[i], err = MatrixView(record, &parts[i]); err != nil {
			return nil, nil, nil, fmt.Errorf("expert part %s: %w", parts[i].Name, err)
		}
	}
	return m[0], m[1], m[2], nil
}

// span is data[off:off+n] with the bounds checked.
func span(data []byte, off, n int64, name string) ([]byte, error) {
	if off < 0 || n < 0 || off > int64(len(data))-n {
		return nil, fmt.Errorf("tensor %s: range [%d, +%d) lies outside its %d-byte region", name, off, n, len(data))
	}
	return data[off : off+n : off+n], nil
}

// KernelEncoding maps a tensor's storage to the kernels encoding that reads it.
func KernelEncoding(t *Tensor) (kernels.Encoding, error) {
	switch {
	case t.DType == DTypeF32:
		return kernels.F32, nil
	case t.DType == DTypeBF16:
		return kernels.BF16, nil
	case t.DType == DTypeF16:
		return kernels.F16, nil
	case t.DType == DTypeU32 && t.Bits == 4:
		return kernels.Q4, nil
	case t.DType == DTypeU32 && t.Bits == 8:
		return kernels.Q8, nil
	}
	return 0, fmt.Errorf("tensor %s: %s %d-bit has no kernel", t.Name, t.DType, t.Bits)
}
