//go:build !amd64 || purego

package kernels

func widenQ8Asm(dst []float32, src []int8, srcStride int, scales []float32, scaleStride, rows, d, group int) bool {
	return false
}

func widenBF16Asm(dst []float32, src []uint16, srcStride, rows, d int) bool { return false }
