//go:build !purego

package kernels

//go:noescape
func deltaRuleAVX512(s *float32, rows, cols int, decay, beta float32, k, v, q, o *float32, next int)

//go:noescape
func deltaRuleAVX2(s *float32, rows, cols int, decay, beta float32, k, v, q, o *float32, next int)

// deltaRuleAsm is deltaRuleGeneric for a multiple of 16 columns (AVX-512) or
// of 8 (AVX2); next is the byte distance from S to the state to prefetch
// (0: none).
func deltaRuleAsm(S []float32, decay, beta float32, k, v, q, o []float32, next int) bool {
	rows, cols := len(k), len(v)
	wide := useFloatAVX512 && cols%floatBlock == 0
	if !wide && !(useFloatAVX2 && cols%floatBlockAVX2 == 0) {
		return false
	}
	_ = S[rows*cols-1]
	_ = q[rows-1]
	_ = o[cols-1]
	if wide {
		deltaRuleAVX512(&S[0], rows, cols, decay, beta, &k[0], &v[0], &q[0], &o[0], next)
	} else {
		deltaRuleAVX2(&S[0], rows, cols, decay, beta, &k[0], &v[0], &q[0], &o[0], next)
	}
	return true
}
