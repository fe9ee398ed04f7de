//go:build !amd64 || purego

package kernels

func widenQ8Asm(dst []float32, src []int8, srcStride int, scales []float32, scaleStride, rows, d, group int) bool {
	return false
}

func widenBF16Asm(dst []float32, src []uint16, srcStride, rows, d int) bool { return false }

func interleaveQueriesAsm(q []float32, d int, qi []float32) bool { return false }

func attendScoresTileAsm(scores, qi []float32, d int, rows []float32, n int, scale float32) {
	panic("kernels: no assembly")
}
