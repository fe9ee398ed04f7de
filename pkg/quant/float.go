package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MaxBF16 is the largest finite bfloat16 (0x7F7F). A group whose values
// exceed it cannot be quantized: its bias would round to infinity.
const MaxBF16 = float32(3.3895313892515355e38)

// BF16ToF32 widens a bfloat16 (the top half of a float32) exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds f to the nearest bfloat16, ties to even. Values beyond
// MaxBF16 round to ±Inf as IEEE rounding demands. A NaN stays a NaN: its sign
// and top payload bits are kept and the quiet bit is set, so a payload that
// lives only in the low 16 bits cannot turn it into an infinity.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE half exactly, subnormals, infinities and NaN
// payloads included.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// A subnormal half is mant·2⁻²⁴: a float32 normal, so renormalise.
	shift := uint32(0)
	for mant&0x400 == 0 {
		mant <<= 1
		shift++
	}
	return math.Float32frombits(sign | (127-15+1-shift)<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 rounds f to the nearest IEEE half, ties to even, producing
// subnormals and ±Inf where the value demands. A NaN stays a quiet NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	halfExp := exp - 127 + 15
	if halfExp >= 0x1f {
		return sign | 0x7c00
	}
	if halfExp <= 0 {
		// The half is subnormal (or zero): its unit is 2⁻²⁴, so the code is
		// the 24-bit significand shifted right by 14−halfExp, rounded.
		shift := uint(14 - halfExp)
		if shift > 24 {
			return sign
		}
		return sign | uint16(roundShiftEven(mant|0x800000, shift))
	}
	// A carry out of the mantissa correctly bumps the exponent, up to Inf.
	return sign | uint16(roundShiftEven(uint32(halfExp)<<23|mant, 13))
}

// roundShiftEven returns v>>shift rounded to nearest, ties to even.
func roundShiftEven(v uint32, shift uint) uint32 {
	q := v >> shift
	rem := v & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// WidenBF16 widens little-endian bfloat16 bytes into dst; len(src) must be
// 2·len(dst).
func WidenBF16(dst []float32, src []byte) {
	mustLen("WidenBF16", len(src), 2*len(dst))
	for i := range dst {
		dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// WidenF16 widens little-endian IEEE half bytes into dst; len(src) must be
// 2·len(dst).
func WidenF16(dst []float32, src []byte) {
	mustLen("WidenF16", len(src), 2*len(dst))
	for i := range dst {
		dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// WidenF32 decodes little-endian float32 bytes into dst; len(src) must be
// 4·len(dst).
func WidenF32(dst []float32, src []byte) {
	mustLen("WidenF32", len(src), 4*len(dst))
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}

// NarrowBF16 rounds src to bfloat16 (F32ToBF16) and writes it little-endian
// into dst; len(dst) must be 2·len(src).
func NarrowBF16(dst []byte, src []float32) {
	mustLen("NarrowBF16", len(dst), 2*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
	}
}

// mustLen panics on a caller's size mistake: these helpers sit in loops over
// tensors whose sizes were validated earlier, so a mismatch is a bug.
func mustLen(fn string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("quant.%s: byte slice has %d bytes, want %d", fn, got, want))
	}
}
