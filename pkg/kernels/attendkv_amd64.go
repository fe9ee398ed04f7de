//go:build !purego

package kernels

//go:noescape
func widenQ8AVX512(dst *float32, src *int8, srcStride int, scales *float32, scaleStride, rows, d, group int)

//go:noescape
func widenBF16AVX512(dst *float32, src *uint16, srcStride, rows, d int)

// widenQ8Asm is widenQ8's loop for d and group multiples of 16.
func widenQ8Asm(dst []float32, src []int8, srcStride int, scales []float32, scaleStride, rows, d, group int) bool {
	if !useFloatAVX512 || d%16 != 0 || group%16 != 0 || rows == 0 {
		return false
	}
	_ = dst[rows*d-1]
	_ = src[(rows-1)*srcStride+d-1]
	_ = scales[(rows-1)*scaleStride+(d/group)-1]
	widenQ8AVX512(&dst[0], &src[0], srcStride, &scales[0], scaleStride, rows, d, group)
	return true
}

// widenBF16Asm is widenBF16's loop for d a multiple of 16.
func widenBF16Asm(dst []float32, src []uint16, srcStride, rows, d int) bool {
	if !useFloatAVX512 || d%16 != 0 || rows == 0 {
		return false
	}
	_ = dst[rows*d-1]
	_ = src[(rows-1)*srcStride+d-1]
	widenBF16AVX512(&dst[0], &src[0], srcStride, rows, d)
	return true
}
