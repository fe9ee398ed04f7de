//go:build !purego

package kernels

//go:noescape
func attendScoresAVX512(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32)

//go:noescape
func attendValuesAVX512(o, w *float32, quads, blocks, wStride int, values *float32, stride, tile int)

// attendScoresAsm is AttendScores for heads in fours and d a multiple of 4:
// qi receives the queries interleaved as [d/4][heads][4], so one 16-lane
// register holds four lanes of four heads.
func attendScoresAsm(scores, q []float32, d int, keys []float32, stride, n int, scale float32, qi []float32) bool {
	heads := len(q) / d
	if !useFloatAVX512 || heads%4 != 0 || d%4 != 0 || n == 0 {
		return false
	}
	for j := range heads {
		row := q[j*d : (j+1)*d]
		for s := 0; s < d; s += 4 {
			copy(qi[s*heads+4*j:s*heads+4*j+4], row[s:s+4])
		}
	}
	_ = keys[(n-1)*stride+d-1]
	attendScoresAVX512(&scores[0], &qi[0], heads/4, d/4, &keys[0], stride, n, scale)
	return true
}

// attendValuesAsm runs one tile of AttendValues for heads in fours and d a
// multiple of 64 (four registers of columns per block); w's rows are
// wStride apart.
func attendValuesAsm(o, w []float32, wStride, d int, values []float32, stride, tile int) bool {
	heads := len(o) / d
	if !useFloatAVX512 || heads%4 != 0 || d%64 != 0 || tile == 0 {
		return false
	}
	_ = w[(heads-1)*wStride+tile-1]
	_ = values[(tile-1)*stride+d-1]
	attendValuesAVX512(&o[0], &w[0], heads/4, d/64, wStride, &values[0], stride, tile)
	return true
}
