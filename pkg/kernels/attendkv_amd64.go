//go:build !purego

package kernels

//go:noescape
func widenQ8AVX512(dst *float32, src *int8, srcStride int, scales *float32, scaleStride, rows, d, group int)

//go:noescape
func widenBF16AVX512(dst *float32, src *uint16, srcStride, rows, d int)

//go:noescape
func widenQ8AVX2(dst *float32, src *int8, srcStride int, scales *float32, scaleStride, rows, d, group int)

//go:noescape
func widenBF16AVX2(dst *float32, src *uint16, srcStride, rows, d int)

// widenQ8Asm is widenQ8's loop for d and group multiples of 16 (AVX-512)
// or of 8 (AVX2).
func widenQ8Asm(dst []float32, src []int8, srcStride int, scales []float32, scaleStride, rows, d, group int) bool {
	wide := useFloatAVX512 && d%16 == 0 && group%16 == 0
	if rows == 0 || !wide && !(useFloatAVX2 && d%8 == 0 && group%8 == 0) {
		return false
	}
	_ = dst[rows*d-1]
	_ = src[(rows-1)*srcStride+d-1]
	_ = scales[(rows-1)*scaleStride+(d/group)-1]
	if wide {
		widenQ8AVX512(&dst[0], &src[0], srcStride, &scales[0], scaleStride, rows, d, group)
	} else {
		widenQ8AVX2(&dst[0], &src[0], srcStride, &scales[0], scaleStride, rows, d, group)
	}
	return true
}

// widenBF16Asm is widenBF16's loop for d a multiple of 16 (AVX-512) or of 8
// (AVX2).
func widenBF16Asm(dst []float32, src []uint16, srcStride, rows, d int) bool {
	wide := useFloatAVX512 && d%16 == 0
	if rows == 0 || !wide && !(useFloatAVX2 && d%8 == 0) {
		return false
	}
	_ = dst[rows*d-1]
	_ = src[(rows-1)*srcStride+d-1]
	if wide {
		widenBF16AVX512(&dst[0], &src[0], srcStride, rows, d)
	} else {
		widenBF16AVX2(&dst[0], &src[0], srcStride, rows, d)
	}
	return true
}

// interleaveQueriesAsm prepares qi for attendScoresTileAsm as
// attendScoresAsm does, once for every tile of a call; false when the
// assembly does not take this shape.
func interleaveQueriesAsm(q []float32, d int, qi []float32) bool {
	heads := len(q) / d
	if !useAttendAsm() || heads%4 != 0 || d%4 != 0 {
		return false
	}
	for j := range heads {
		row := q[j*d : (j+1)*d]
		for s := 0; s < d; s += 4 {
			copy(qi[s*heads+4*j:s*heads+4*j+4], row[s:s+4])
		}
	}
	return true
}

// attendScoresTileAsm is attendScoresAsm over rows contiguous rows of width
// d with qi already interleaved.
func attendScoresTileAsm(scores, qi []float32, d int, rows []float32, n int, scale float32) {
	heads := len(qi) / d
	_ = scores[heads*n-1]
	_ = rows[n*d-1]
	attendScores4(&scores[0], &qi[0], heads/4, d/4, &rows[0], d, n, scale)
}
