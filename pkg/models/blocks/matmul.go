package blocks

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// MatMul computes dst [n, w.Rows] = x [n, w.Cols] · wᵀ on pool. A single
// row goes through MatVecFast; the kernels guarantee MatMulFast rows are
// bitwise equal to it, for any pool size (a nil pool computes on this
// goroutine). Quantized weights take the int8-activation kernels, float
// weights the float reference, which keeps 16-bit installs exact.
func MatMul(pool *kernels.Pool, dst []float32, w *kernels.Matrix, x []float32, n int) {
	dst = dst[:n*w.Rows]
	x = x[:n*w.Cols]
	if n == 1 {
		pool.MatVecFast(dst, w, x)
		return
	}
	for lo := 0; lo < n; lo += MatMulRows {
		hi := min(lo+MatMulRows, n)
		pool.MatMulFast(dst[lo*w.Rows:hi*w.Rows], w, x[lo*w.Cols:hi*w.Cols], hi-lo)
	}
}

// MatMulRows is the most rows one kernel call multiplies. The kernels run
// each block of weight rows against every row of x in turn, so beyond a few
// hundred rows x no longer stays in the core's cache: a long prefill pass
// (docs/prefill.md) computed about 20% slower per token unsplit. Rows are
// independent, so splitting changes no bits.
const MatMulRows = 256

// MatMulMulti is MatMul for several matrices reading the same x, as one
// pool job (one quantization of x, one hand-off); each dst is bitwise what
// MatMul gives.
func MatMulMulti(pool *kernels.Pool, dsts [][]float32, ws []*kernels.Matrix, x []float32, n int) {
	for i, w := range ws {
		dsts[i] = dsts[i][:n*w.Rows]
	}
	if n <= MatMulRows {
		pool.MatMulFastMulti(dsts, ws, x[:n*ws[0].Cols], n)
		return
	}
	part := make([][]float32, len(dsts))
	for lo := 0; lo < n; lo += MatMulRows {
		hi := min(lo+MatMulRows, n)
		for i, w := range ws {
			part[i] = dsts[i][lo*w.Rows : hi*w.Rows]
		}
		pool.MatMulFastMulti(part, ws, x[lo*ws[0].Cols:hi*ws[0].Cols], hi-lo)
	}
}

// CheckMatrix verifies that m is rows×cols and that its buffers are exactly
// as long as its encoding needs, so a kernel can never read out of bounds.
func CheckMatrix(m *kernels.Matrix, rows, cols int) error {
	if m == nil {
		return fmt.Errorf("nil matrix")
	}
	if m.Rows != rows || m.Cols != cols {
		return fmt.Errorf("shape [%d, %d], the geometry needs [%d, %d]; the install does not match its manifest geometry", m.Rows, m.Cols, rows, cols)
	}
	return m.Validate()
}
