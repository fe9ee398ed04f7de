package main

import (
	"math"
)

// GGML block formats (ggml-common.h): 32 values per block, an fp16 scale
// first. The quantizers below follow ggml's reference quantizers
// (quantize_row_q4_0_ref, quantize_row_q8_0_ref) operation for operation, in
// float32, so the bytes equal ggml's; --selftest checks that against the
// libggml-base that node-llama-cpp ships.
const (
	qk          = 32
	q4BlockSize = 2 + qk/2
	q8BlockSize = 2 + qk
)

// quantizeQ4_0 appends the Q4_0 blocks of x (len a multiple of 32).
func quantizeQ4_0(dst []byte, x []float32) []byte {
	for b := 0; b+qk <= len(x); b += qk {
		blk := x[b : b+qk]
		var amax, max float32
		for _, v := range blk {
			if a := float32(math.Abs(float64(v))); amax < a {
				amax, max = a, v
			}
		}
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		h := fp32ToFP16(d)
		dst = append(dst, byte(h), byte(h>>8))
		for j := 0; j < qk/2; j++ {
			// The explicit float32 conversions keep the product rounded
			// before the add, as C does (Go may otherwise fuse them).
			x0 := float32(blk[j]*id) + 8.5
			x1 := float32(blk[qk/2+j]*id) + 8.5
			dst = append(dst, min(15, uint8(int8(x0)))|min(15, uint8(int8(x1)))<<4)
		}
	}
	return dst
}

// quantizeQ8_0 appends the Q8_0 blocks of x (len a multiple of 32).
func quantizeQ8_0(dst []byte, x []float32) []byte {
	for b := 0; b+qk <= len(x); b += qk {
		blk := x[b : b+qk]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		h := fp32ToFP16(d)
		dst = append(dst, byte(h), byte(h>>8))
		for _, v := range blk {
			dst = append(dst, byte(int8(roundf(float32(v*id)))))
		}
	}
	return dst
}

// roundf is C's roundf: halves away from zero.
func roundf(v float32) float32 { return float32(math.Round(float64(v))) }

// fp32ToFP16 converts with round-to-nearest-even, as F16C's VCVTPS2PH and
// ggml's software fallback do.
func fp32ToFP16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 142: // ≥ 2^16: overflow to Inf
		return sign | 0x7c00
	case exp >= 113: // normal half
		h := uint32(exp-112)<<10 | mant>>13
		round := mant & 0x1fff
		if round > 0x1000 || (round == 0x1000 && h&1 == 1) {
			h++ // may carry into the exponent, up to Inf: still correct
		}
		return sign | uint16(h)
	case exp >= 102: // subnormal half
		m := mant | 0x800000
		shift := uint(126 - exp)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	return sign
}

// fp16ToFP32 is the exact inverse for finite values (tests use it).
func fp16ToFP32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}
