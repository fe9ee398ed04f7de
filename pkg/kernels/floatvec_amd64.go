//go:build !purego

package kernels

// The float row kernels in float_amd64.s (written by _asm/amd64float): bit
// for bit the references of floatvec.go and kernels_generic.go (no fused
// multiply-adds, the same per-lane order).

//go:noescape
func dotBF16AVX2(w *byte, x *float32, n int) float32

//go:noescape
func dotBF16x4AVX2(dst *[4]float32, w *byte, stride int, x *float32, n int)

//go:noescape
func dotBF16x4x4AVX512(dst *[16]float32, w *byte, stride int, x *float32, xstride int, n int)

// useFloatAVX512, useFloatAVX2 and useBF16AVX2 select the assembly (the
// AVX-512 kernels first, where both apply); the tests turn them off to
// compare with the references.
var (
	useFloatAVX512 = hasAVX512
	useFloatAVX2   = hasAVX2
	useBF16AVX2    = hasAVX2
)

// floatBlock is the column granularity of the AVX-512 row kernels (one
// 16-lane register; they take 64 columns per pass where they can); other
// widths take the reference.
const floatBlock = 16

// floatBlockAVX2 is the column granularity of the AVX2 float kernels (one
// 8-lane register).
const floatBlockAVX2 = 8

// dotBF16Asm is dotBF16 for len(x) a positive multiple of 8.
func dotBF16Asm(w []byte, x []float32) (float32, bool) {
	n := len(x)
	if !useBF16AVX2 || n == 0 || n%8 != 0 {
		return 0, false
	}
	_ = w[2*n-1]
	return dotBF16AVX2(&w[0], &x[0], n), true
}

// dotBF16x4Asm is dotBF16 of four rows, stride bytes apart from w, with x.
func dotBF16x4Asm(dst *[4]float32, w []byte, stride int, x []float32) bool {
	n := len(x)
	if !useBF16AVX2 || n == 0 || n%8 != 0 {
		return false
	}
	_ = w[3*stride+2*n-1]
	dotBF16x4AVX2(dst, &w[0], stride, &x[0], n)
	return true
}

// dotBF16x4x4Asm is dotBF16x4Asm for four tokens, xs[t·len(x0)...] being
// token t's x (len(xs) = 4·n): dst[4t+r] is row r with token t.
func dotBF16x4x4Asm(dst *[16]float32, w []byte, stride int, xs []float32) bool {
	n := len(xs) / 4
	if !useBF16AVX2 || !useFloatAVX512 || n == 0 || n%8 != 0 {
		return false
	}
	_ = w[3*stride+2*n-1]
	_ = xs[4*n-1]
	dotBF16x4x4AVX512(dst, &w[0], stride, &xs[0], 4*n, n)
	return true
}

//go:noescape
func dotRows4AVX(dst, a *float32, n int, b *float32)

//go:noescape
func axpyRowsAVX512(dst *float32, rows, stride int, alpha *float32, x *float32, n int)

// dotRowsAsm computes DotRows for rows in blocks of four, returning how many
// rows it did (0 without AVX or for lengths not a multiple of 4).
func dotRowsAsm(dst, a, b []float32) int {
	n, rows := len(b), len(dst)
	if !useFloatAVX512 || n == 0 || n%4 != 0 || rows < 4 {
		return 0
	}
	done := rows &^ 3
	_ = a[done*n-1]
	for j := 0; j < done; j += 4 {
		dotRows4AVX(&dst[j], &a[j*n], n, &b[0])
	}
	return done
}

// axpyRowsAsm does AxpyRows over the first n&^15 columns of every row and
// returns that count.
func axpyRowsAsm(dst, alpha, x []float32) int {
	n, rows := len(x), len(alpha)
	cols := n &^ 15
	if !useFloatAVX512 || cols == 0 || rows == 0 {
		return 0
	}
	_ = dst[(rows-1)*n+cols-1]
	axpyRowsAVX512(&dst[0], rows, n, &alpha[0], &x[0], cols)
	return cols
}
