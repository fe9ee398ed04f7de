package blocks

import (
	"github.com/nvmai/nvmai/pkg/kernels"
)

// Rotate applies rotate-half RoPE to the first 2·len(cos) dims of x: pairs
// (j, j+half), the rest pass through.
func Rotate(x, cos, sin []float32) {
	half := len(cos)
	for j := range half {
		x0, x1 := x[j], x[j+half]
		x[j] = x0*cos[j] - x1*sin[j]
		x[j+half] = x1*cos[j] + x0*sin[j]
	}
}

// SoftmaxInPlace replaces x by softmax(x). The denominator is summed in
// float64: over a long context a float32 running sum would lose small terms.
func SoftmaxInPlace(x []float32) {
	kernels.Exp(x, x, kernels.Max(x))
	var sum float64
	for _, e := range x {
		sum += float64(e)
	}
	kernels.Scale(x, float32(1/sum))
}
