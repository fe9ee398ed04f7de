//go:build !amd64 || purego

package kernels

// Without AVX-512 assembly there is no batched kernel: products go token by
// token (qRows).
const qBatchAvailable = false

func qBatchSteps(groups int) []qBatchKernel { return nil }

func qUnpackQ4(dst, w []byte, rows, groups int) { panic("kernels: no batched kernel in this build") }

func qConvertScales(buf []float32, m *Matrix, lo, hi int) ([]float32, int) {
	panic("kernels: no batched kernel in this build")
}
