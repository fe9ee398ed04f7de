//go:build !amd64 || purego

package kernels

func deltaRuleAsm(S []float32, decay, beta float32, k, v, q, o []float32, next int) bool {
	return false
}
