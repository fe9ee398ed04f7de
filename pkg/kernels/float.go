package kernels

import "math"

// The kernels decode bfloat16 and IEEE half themselves rather than import
// pkg/quant, which sits beside them and is only their test reference; the
// tests check these against quant's exhaustively.

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
	// Zero or subnormal: mant·2⁻²⁴ is exact in float32.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		return -v
	}
	return v
}
