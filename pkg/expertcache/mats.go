package expertcache

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime/qwen35"
)

// The views below repeat pkg/runtime's expertMats/matrixAt (which this
// package may not import: runtime will import us). A slot's buffer never
// moves, so its views are built once in New and handed out on every hit.

// slotMats views the expert record held in rec (stride bytes).
func slotMats(rec []byte, parts []packexperts.Tensor) (qwen35.ExpertMats, error) {
	var m [3]*kernels.Matrix
	for i := range parts {
		mat, err := matrixIn(rec, &parts[i])
		if err != nil {
			return qwen35.ExpertMats{}, fmt.Errorf("expert part %s: %w", parts[i].Name, err)
		}
		m[i] = mat
	}
	return qwen35.ExpertMats{Gate: m[0], Up: m[1], Down: m[2]}, nil
}

func matrixIn(rec []byte, t *packexperts.Tensor) (*kernels.Matrix, error) {
	enc, err := kernelEncoding(t)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("shape %v is not a matrix", t.Shape)
	}
	data, err := span(rec, t.Offset, t.Length)
	if err != nil {
		return nil, err
	}
	m := &kernels.Matrix{Rows: int(t.Shape[0]), Cols: int(t.Shape[1]), Enc: enc, Data: data}
	if t.Scales != nil && t.Biases != nil {
		if m.Scales, err = span(rec, t.Scales.Offset, t.Scales.Length); err != nil {
			return nil, err
		}
		if m.Biases, err = span(rec, t.Biases.Offset, t.Biases.Length); err != nil {
			return nil, err
		}
	}
	return m, m.Validate()
}

// span is rec[off:off+n] with the bounds checked, since the manifest is input.
func span(rec []byte, off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off > int64(len(rec))-n {
		return nil, fmt.Errorf("range [%d, +%d) lies outside the %d-byte expert record", off, n, len(rec))
	}
	return rec[off : off+n : off+n], nil
}

func kernelEncoding(t *packexperts.Tensor) (kernels.Encoding, error) {
	switch {
	case t.DType == packexperts.DTypeF32:
		return kernels.F32, nil
	case t.DType == packexperts.DTypeBF16:
		return kernels.BF16, nil
	case t.DType == packexperts.DTypeF16:
		return kernels.F16, nil
	case t.DType == packexperts.DTypeU32 && t.Bits == 4:
		return kernels.Q4, nil
	case t.DType == packexperts.DTypeU32 && t.Bits == 8:
		return kernels.Q8, nil
	}
	return 0, fmt.Errorf("%s %d-bit has no kernel", t.DType, t.Bits)
}
