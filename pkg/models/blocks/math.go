package blocks

import (
	"math"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// Scalar functions in float32 with float64 intermediates: Go has no float32
// exp, and rounding once from float64 is at least as accurate as torch's
// float32 kernels. Each is a pure function of its input, which is all the
// determinism contract needs. The activations over whole vectors (SiLU in
// the conv and gated norm, SwiGLU, the attention output gate) use the
// kernels package's float32 versions instead: they run thousands of times a
// layer, and are within a few ulp of these (kernels.Sigmoid).

// Exp32 is eˣ rounded to float32.
func Exp32(x float32) float32 { return float32(math.Exp(float64(x))) }

// Sigmoid32 is 1/(1+e⁻ˣ) rounded to float32.
func Sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// Softplus32 is ln(1+eˣ) with torch's default threshold: above 20 it is x.
func Softplus32(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// RMSNorm writes x / sqrt(mean(x²) + eps) · scale into dst (len(x) values).
// scale is 1+w for the zero-centred norms.
func RMSNorm(dst, x, scale []float32, eps float32) {
	inv := InvRMS(x, eps)
	for i, v := range x {
		dst[i] = v * inv * scale[i]
	}
}

// InvRMS is 1 / sqrt(mean(x²) + eps); the sum of squares is accumulated in
// float64 in index order.
func InvRMS(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	mean := float32(ss / float64(len(x)))
	return float32(1 / math.Sqrt(float64(mean+eps)))
}

// RMSNormRows applies RMSNorm to each row of width n; scale has n values.
func RMSNormRows(dst, x, scale []float32, n int, eps float32) {
	for r := 0; r+n <= len(x); r += n {
		RMSNorm(dst[r:r+n], x[r:r+n], scale, eps)
	}
}

// L2NormScaled writes x / sqrt(Σx² + 1e-6) · post into dst. The GDN's L2
// norm uses a fixed 1e-6, not rms_norm_eps; post is 1/sqrt(Dk) for queries
// (applied after normalising, as transformers does) and 1 for keys.
func L2NormScaled(dst, x []float32, post float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(float64(float32(ss)+1e-6)))
	for i, v := range x {
		dst[i] = v * inv * post
	}
}

// AddTo does dst += src element-wise.
func AddTo(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// SwiGLU writes silu(gate) ⊙ up into gate.
func SwiGLU(gate, up []float32) { kernels.SwiGLU(gate, up[:len(gate)]) }

// Grow returns a slice of length n backed by *buf, reallocating only when
// the capacity is short. Contents are unspecified.
func Grow(buf *[]float32, n int) []float32 {
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	return (*buf)[:n]
}

// OnePlus turns a zero-centred RMSNorm weight into the factor it multiplies
// by, 1 + w, rounded to float32 as transformers does before multiplying.
func OnePlus(w []float32) []float32 {
	if w == nil {
		return nil
	}
	out := make([]float32, len(w))
	for i, v := range w {
		out[i] = 1 + v
	}
	return out
}

// WorkerSlots returns buf with at least one element per pool thread; call
// it before a pool job so no goroutine grows a shared slice.
func WorkerSlots[T any](buf []T, threads int) []T {
	if len(buf) < threads {
		buf = append(buf, make([]T, threads-len(buf))...)
	}
	return buf
}
