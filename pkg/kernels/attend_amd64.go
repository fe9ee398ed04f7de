//go:build !purego

package kernels

//go:noescape
func attendScoresAVX512(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32)

//go:noescape
func attendValuesAVX512(o, w *float32, quads, blocks, wStride int, values *float32, stride, tile int)

//go:noescape
func attendScoresAVX2(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32)

//go:noescape
func attendValuesAVX2(o, w *float32, pairs, blocks, wStride int, values *float32, stride, tile int)

// useAttendAsm reports whether the float kernels run in assembly here.
func useAttendAsm() bool { return useFloatAVX512 || useFloatAVX2 }

// attendScoresAsm is AttendScores for heads in fours and d a multiple of 4:
// qi receives the queries interleaved as [d/4][heads][4], so one 16-lane
// register holds four lanes of four heads.
func attendScoresAsm(scores, q []float32, d int, keys []float32, stride, n int, scale float32, qi []float32) bool {
	heads := len(q) / d
	if !useAttendAsm() || heads%4 != 0 || d%4 != 0 || n == 0 {
		return false
	}
	for j := range heads {
		row := q[j*d : (j+1)*d]
		for s := 0; s < d; s += 4 {
			copy(qi[s*heads+4*j:s*heads+4*j+4], row[s:s+4])
		}
	}
	_ = keys[(n-1)*stride+d-1]
	attendScores4(&scores[0], &qi[0], heads/4, d/4, &keys[0], stride, n, scale)
	return true
}

// attendScores4 runs the scores kernel of this CPU.
func attendScores4(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32) {
	if useFloatAVX512 {
		attendScoresAVX512(scores, qi, quads, steps, keys, stride, n, scale)
	} else {
		attendScoresAVX2(scores, qi, quads, steps, keys, stride, n, scale)
	}
}

// attendValuesAsm runs one tile of AttendValues: with AVX-512 for heads in
// fours and d a multiple of 64 (four registers of columns per block), with
// AVX2 for heads in twos and d a multiple of 32; w's rows are wStride
// apart.
func attendValuesAsm(o, w []float32, wStride, d int, values []float32, stride, tile int) bool {
	heads := len(o) / d
	wide := useFloatAVX512 && heads%4 == 0 && d%64 == 0
	if tile == 0 || !wide && !(useFloatAVX2 && heads%2 == 0 && d%32 == 0) {
		return false
	}
	_ = w[(heads-1)*wStride+tile-1]
	_ = values[(tile-1)*stride+d-1]
	if wide {
		attendValuesAVX512(&o[0], &w[0], heads/4, d/64, wStride, &values[0], stride, tile)
	} else {
		attendValuesAVX2(&o[0], &w[0], heads/2, d/32, wStride, &values[0], stride, tile)
	}
	return true
}
