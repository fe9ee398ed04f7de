// Package kernels computes matrix-vector and matrix-matrix products over the
// weight encodings nvmai installs hold (F32, BF16, F16, MLX affine 4- and
// 8-bit). It knows nothing about models: the runtime hands it a Matrix and
// activations. Every kernel has a pure-Go reference (kernels_generic.go) that
// the SIMD versions are tested against; -tags purego builds only references.
package kernels

// Encoding is how a Matrix stores its weights.
type Encoding uint8

const (
	F32  Encoding = iota // little-endian float32, row-major
	BF16                 // bfloat16 (top half of a float32), row-major
	F16                  // IEEE half, row-major
	Q4                   // MLX affine 4-bit: uint32 words, element j at bits [4j,4j+4), LSB first
	Q8                   // MLX affine 8-bit: uint32 words, element j at bits [8j,8j+8)
)

// GroupSize is the MLX affine quantization group along a row.
const GroupSize = 64

// Matrix is a weight matrix of Rows×Cols (a linear layer's [out, in]).
// For Q4/Q8, Scales and Biases hold Rows×Cols/GroupSize bfloat16 values each
// and an element is scale·q + bias. Data, Scales and Biases are views into
// memory the caller owns (an mmap'd file or a slot of the expert cache).
type Matrix struct {
	Rows, Cols int
	Enc        Encoding
	Data       []byte
	Scales     []byte
	Biases     []byte
}
