//go:build !amd64 || purego

package kernels

// Without AVX-512 assembly there is no batched kernel: products go token by
// token (qRows).
const qBatchAvailable = false

func qBatchRows(dst *float32, w *byte, stride int, scales, biases *byte, rows, groups int, xqT *int8, dsT *float32, idx *int32, mask int, work *byte, tail int) {
	panic("kernels: no batched kernel in this build")
}

func qUnpackQ4(dst, w []byte, rows, groups int) { panic("kernels: no batched kernel in this build") }
