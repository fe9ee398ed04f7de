//go:build !amd64 || purego

package kernels

// Without amd64 assembly there is no batched kernel: products go token by
// token (qRows).
const qBatchAvailable = false

const qBatchMinTokensQ8 = 6

func qBatchSteps(groups int) []qBatchKernel { return nil }

func qUnpackQ4(dst, w []byte, rows, groups int, avx2 bool) {
	panic("kernels: no batched kernel in this build")
}

func qConvertScales(buf []float32, m *Matrix, lo, hi int) ([]float32, int) {
	panic("kernels: no batched kernel in this build")
}

func qWidenRows(buf []byte, m *Matrix, lo, hi int) []byte {
	panic("kernels: no batched kernel in this build")
}
