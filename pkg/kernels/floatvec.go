package kernels

import "fmt"

// Element-wise float32 row kernels for the recurrent and attention math of
// the models (the Gated DeltaNet state update is DeltaRule, deltarule.go). Every product and every sum
// is rounded to float32 on its own (the explicit conversions forbid fused
// multiply-adds), each output column is a chain over the rows in ascending
// order, and columns never mix, so the SIMD versions are bitwise equal to
// these references on every CPU and GOAMD64 level.

func checkRows(fn string, S []float32, rows, cols int) {
	if len(S) != rows*cols {
		panic(fmt.Sprintf("kernels.%s: %d values of S for %d rows × %d columns", fn, len(S), rows, cols))
	}
}

// bf16RowsAsm is matMulRows for BF16 through the assembly dot, four rows at
// a time (and four tokens, with AVX-512), reporting false (nothing computed)
// where there is none. Each output is bitwise dotBF16's.
func bf16RowsAsm(dst []float32, m *Matrix, x []float32, n, lo, hi int) bool {
	c := m.Cols
	var four [4]float32
	if hi-lo < 4 || !dotBF16x4Asm(&four, m.Data[lo*2*c:(lo+4)*2*c], 2*c, x[:c]) {
		return false
	}
	var sixteen [16]float32
	r := lo
	for ; r+4 <= hi; r += 4 {
		w := m.Data[r*2*c : (r+4)*2*c]
		j := 0
		// Four tokens at a time where the CPU has the kernel: each widened
		// weight vector then serves four tokens.
		for ; j+4 <= n && dotBF16x4x4Asm(&sixteen, w, 2*c, x[j*c:(j+4)*c]); j += 4 {
			for t := range 4 {
				copy(dst[(j+t)*m.Rows+r:(j+t)*m.Rows+r+4], sixteen[4*t:4*t+4])
			}
		}
		for ; j < n; j++ {
			dotBF16x4Asm(&four, w, 2*c, x[j*c:(j+1)*c])
			copy(dst[j*m.Rows+r:j*m.Rows+r+4], four[:])
		}
	}
	for ; r < hi; r++ {
		for j := range n {
			dst[j*m.Rows+r] = dotBF16(m.Data[r*2*c:(r+1)*2*c], x[j*c:(j+1)*c])
		}
	}
	return true
}

// DotRows sets dst[j] = a[j]·b for every row j of a (len(dst) rows of len(b)
// values, row-major): per row, four float32 lanes, lane l summing the
// products of the elements i ≡ l (mod 4) in order, the len(b) mod 4 tail
// added to lane 0 in order, then (l0+l1)+(l2+l3).
func DotRows(dst, a, b []float32) {
	checkRows("DotRows", a, len(dst), len(b))
	n := len(b)
	j := dotRowsAsm(dst, a, b)
	for ; j < len(dst); j++ {
		dst[j] = dot4Generic(a[j*n:(j+1)*n], b)
	}
}

func dot4Generic(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float32(a[i] * b[i])
		s1 += float32(a[i+1] * b[i+1])
		s2 += float32(a[i+2] * b[i+2])
		s3 += float32(a[i+3] * b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float32(a[i] * b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// AxpyRows does dst[j,:] += alpha[j]·x for every row j of dst (len(alpha)
// rows of len(x) values), each product rounded to float32 before the add.
func AxpyRows(dst, alpha, x []float32) {
	checkRows("AxpyRows", dst, len(alpha), len(x))
	n := len(x)
	done := axpyRowsAsm(dst, alpha, x)
	for j, al := range alpha {
		row := dst[j*n : (j+1)*n : (j+1)*n]
		for i := done; i < n; i++ {
			row[i] += float32(al * x[i])
		}
	}
}
