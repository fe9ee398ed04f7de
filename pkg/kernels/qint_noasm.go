//go:build (!amd64 && !arm64) || purego

package kernels

// Without assembly the reference is the only integer kernel.
var (
	qImplementations []qImplementation
	qRowsActive      qRowsFunc = qRowsGeneric
)

func quantizeTokenAsm(x []float32, groups int, q8, q4 []int8, ds []float32, sumQ []int32) bool {
	return false
}
