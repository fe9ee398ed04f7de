package kernels

import (
	"fmt"
	"sync"
)

// MatVecFast is MatVec through the integer path for Q4 and Q8: x is
// quantized to int8 per group of 64 (see QActivation) and each row is an
// exact integer dot per group plus a fixed-order float combination
// (qint_generic.go). It differs from MatVec by the activation rounding, at
// most Σ_g |s_g|·(dx_g/2)·Σ_i q_i per row; on random normal weights and
// activations the RMS error is about 1.5% of the RMS output (≈ 4e-3 of
// max|y|). Float encodings use MatVec unchanged.
func MatVecFast(dst []float32, m *Matrix, x []float32) {
	if !m.Enc.quantized() {
		MatVec(dst, m, x)
		return
	}
	checkShapes("MatVecFast", dst, m, x, 1)
	qa := qaScratch.Get().(*QActivation)
	qa.Quantize(x, m.Cols)
	qRows(dst, m, qa, 0, 0, m.Rows)
	qaScratch.Put(qa)
}

// MatMulFast is MatMul through the integer path for Q4 and Q8: each output
// row is bitwise what MatVecFast gives for that row of x. Float encodings use
// MatMul unchanged.
func MatMulFast(dst []float32, m *Matrix, x []float32, n int) {
	if !m.Enc.quantized() {
		MatMul(dst, m, x, n)
		return
	}
	checkShapes("MatMulFast", dst, m, x, n)
	if n == 0 {
		return
	}
	qa := qaScratch.Get().(*QActivation)
	qa.Quantize(x, m.Cols)
	qMatMulRows(dst, m, qa, 0, m.Rows)
	qaScratch.Put(qa)
}

// qaScratch recycles the quantized activations of MatVecFast and MatMulFast.
var qaScratch = sync.Pool{New: func() any { return new(QActivation) }}

// MatVecQ sets dst = m·x for the one token quantized in qa; m must be Q4 or
// Q8 with Cols = qa.Cols(). Quantize once and call it for every matrix that
// reads the same x.
func MatVecQ(dst []float32, m *Matrix, qa *QActivation) {
	checkQShapes("MatVecQ", dst, m, qa, 1)
	qRows(dst, m, qa, 0, 0, m.Rows)
}

// MatMulQ multiplies m by every token in qa: dst is Tokens()×Rows, each row
// bitwise what MatVecQ gives for that token.
func MatMulQ(dst []float32, m *Matrix, qa *QActivation) {
	checkQShapes("MatMulQ", dst, m, qa, qa.tokens)
	qMatMulRows(dst, m, qa, 0, m.Rows)
}

func checkQShapes(fn string, dst []float32, m *Matrix, qa *QActivation, n int) {
	if !m.Enc.quantized() {
		panic(fmt.Sprintf("kernels.%s: %v matrix %d×%d; the integer path takes Q4 or Q8 only", fn, m.Enc, m.Rows, m.Cols))
	}
	if qa.cols != m.Cols || qa.tokens != n || len(dst) != n*m.Rows {
		panic(fmt.Sprintf("kernels.%s: %v matrix %d×%d with %d tokens of %d quantized values needs %d token(s) of %d and len(dst) = %d, got len(dst) = %d",
			fn, m.Enc, m.Rows, m.Cols, qa.tokens, qa.cols, n, m.Cols, n*m.Rows, len(dst)))
	}
}

// matMulChunkBytes bounds the weights one row chunk of a batched product
// spans: every token runs over the chunk while it sits in L2, so weights
// stream from memory once per batch instead of once per token. A variable so
// the tests can force many chunks.
var matMulChunkBytes = 128 << 10

// qMatMulRows computes rows [lo, hi) for every token in qa, row chunk by row
// chunk. dst is tokens×Rows.
func qMatMulRows(dst []float32, m *Matrix, qa *QActivation, lo, hi int) {
	if qa.tokens == 1 {
		qRows(dst, m, qa, 0, lo, hi)
		return
	}
	if qBatchEnabled && qa.tokens >= qBatchMinTokens(m.Enc) {
		qMatMulBatched(dst, m, qa, lo, hi)
		return
	}
	chunk := max(1, matMulChunkBytes/qRowBytes(m))
	for c := lo; c < hi; c += chunk {
		end := min(c+chunk, hi)
		for tok := range qa.tokens {
			qRows(dst[tok*m.Rows:(tok+1)*m.Rows], m, qa, tok, c, end)
		}
	}
}

// qRowBytes is one row's packed weights plus its scales and biases.
func qRowBytes(m *Matrix) int {
	params := m.Cols / GroupSize * 4
	if m.Enc == Q4 {
		return m.Cols/2 + params
	}
	return m.Cols + params
}

// qRowsFunc computes rows [lo, hi) of a Q4/Q8 matrix against token tok of qa
// into dst[lo:hi]; every implementation gives the reference's bits.
type qRowsFunc func(dst []float32, m *Matrix, qa *QActivation, tok, lo, hi int)

// qImplementation is one SIMD kernel this build and CPU can run; the tests
// check each against qRowsGeneric.
type qImplementation struct {
	name string
	rows qRowsFunc
}

// qRows runs the best integer kernel for this CPU (qRowsActive, chosen at
// init from the CPU features; the tests swap it).
func qRows(dst []float32, m *Matrix, qa *QActivation, tok, lo, hi int) {
	qRowsActive(dst, m, qa, tok, lo, hi)
}
