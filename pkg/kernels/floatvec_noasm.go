//go:build !amd64 || purego

package kernels

func dotBF16Asm(w []byte, x []float32) (float32, bool) { return 0, false }

func dotBF16x4Asm(dst *[4]float32, w []byte, stride int, x []float32) bool { return false }

func dotBF16x4x4Asm(dst *[16]float32, w []byte, stride int, xs []float32) bool { return false }

func dotRowsAsm(dst, a, b []float32) int { return 0 }

func axpyRowsAsm(dst, alpha, x []float32) int { return 0 }

func attendScoresAsm(scores, q []float32, d int, keys []float32, stride, n int, scale float32, qi []float32) bool {
	return false
}

func attendValuesAsm(o, w []float32, wStride, d int, values []float32, stride, tile int) bool {
	return false
}
