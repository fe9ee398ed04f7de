//go:build !purego

package kernels

//go:noescape
func deltaRuleAVX512(s *float32, rows, cols int, decay, beta float32, k, v, q, o *float32)

// deltaRuleAsm is deltaRuleGeneric for a multiple of 16 columns.
func deltaRuleAsm(S []float32, decay, beta float32, k, v, q, o []float32) bool {
	rows, cols := len(k), len(v)
	if !useFloatAVX512 || cols%floatBlock != 0 {
		return false
	}
	_ = S[rows*cols-1]
	_ = q[rows-1]
	_ = o[cols-1]
	deltaRuleAVX512(&S[0], rows, cols, decay, beta, &k[0], &v[0], &q[0], &o[0])
	return true
}
