package kernels

import "math"

// The element-wise passes of a softmax around Exp: the maximum it shifts by
// and the scaling by the reciprocal of the sum. Over a long context they
// ran as scalar loops (Go's max is a chain of compares with NaN and signed
// zero handling), slower than Exp itself; the AVX-512 forms give the
// references' results bit for bit.

// Max returns the largest element of x, as folding Go's max from −Inf does:
// NaN if any element is NaN, +0 over −0; −Inf for an empty x.
func Max(x []float32) float32 {
	if m, ok := maxAsm(x); ok {
		return m
	}
	return maxGeneric(x)
}

// maxGeneric is the reference for maxAsm.
func maxGeneric(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// Scale sets x[i] *= s.
func Scale(x []float32, s float32) {
	if len(x) == 0 || scaleAsm(x, s) {
		return
	}
	scaleGeneric(x, s)
}

// scaleGeneric is the reference for scaleAsm.
func scaleGeneric(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}
