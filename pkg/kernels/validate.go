package kernels

import (
	"fmt"
	"math"
)

// String names the encoding as the install manifest and error messages do.
func (e Encoding) String() string {
	switch e {
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	case Q4:
		return "Q4"
	case Q8:
		return "Q8"
	}
	return fmt.Sprintf("Encoding(%d)", uint8(e))
}

// Validate checks that Data, Scales and Biases are exactly as long as Rows,
// Cols and Enc demand, so the kernels can index them without further checks.
// Call it once when a Matrix is built over a file or a slot, not per product.
func (m *Matrix) Validate() error {
	if m.Rows <= 0 || m.Cols <= 0 {
		return fmt.Errorf("kernels: %v matrix is %d×%d; both dimensions must be positive", m.Enc, m.Rows, m.Cols)
	}
	if m.Rows > math.MaxInt/8/m.Cols {
		return fmt.Errorf("kernels: %v matrix %d×%d is too large to address", m.Enc, m.Rows, m.Cols)
	}
	n := m.Rows * m.Cols
	var dataBytes int
	var how string
	switch m.Enc {
	case F32:
		dataBytes, how = 4*n, "Rows·Cols·4"
	case BF16, F16:
		dataBytes, how = 2*n, "Rows·Cols·2"
	case Q4:
		dataBytes, how = n/2, "Rows·Cols/2"
	case Q8:
		dataBytes, how = n, "Rows·Cols"
	default:
		return fmt.Errorf("kernels: matrix %d×%d has unknown encoding %v", m.Rows, m.Cols, m.Enc)
	}
	if len(m.Data) != dataBytes {
		return fmt.Errorf("kernels: %v matrix %d×%d: Data is %d bytes, want %d (%s)",
			m.Enc, m.Rows, m.Cols, len(m.Data), dataBytes, how)
	}
	if !m.Enc.quantized() {
		if len(m.Scales) != 0 || len(m.Biases) != 0 {
			return fmt.Errorf("kernels: %v matrix %d×%d has %d scale and %d bias bytes; only Q4 and Q8 carry them",
				m.Enc, m.Rows, m.Cols, len(m.Scales), len(m.Biases))
		}
		return nil
	}
	if m.Cols%GroupSize != 0 {
		return fmt.Errorf("kernels: %v matrix %d×%d: Cols must be a multiple of the group size %d",
			m.Enc, m.Rows, m.Cols, GroupSize)
	}
	paramBytes := n / GroupSize * 2
	if len(m.Scales) != paramBytes || len(m.Biases) != paramBytes {
		return fmt.Errorf("kernels: %v matrix %d×%d: Scales and Biases are %d and %d bytes, want %d each (Rows·Cols/%d bfloat16)",
			m.Enc, m.Rows, m.Cols, len(m.Scales), len(m.Biases), paramBytes, GroupSize)
	}
	return nil
}

func (e Encoding) quantized() bool { return e == Q4 || e == Q8 }
