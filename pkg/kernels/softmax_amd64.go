//go:build !purego

package kernels

// maxAVX512 folds x (n > 0 values) with VMAXPS, 64 lanes at a time, and
// reports whether any value was NaN.
//
//go:noescape
func maxAVX512(x *float32, n int) (m float32, nan bool)

//go:noescape
func scaleAVX512(x *float32, n int, s float32)

// maxAsm is Max through maxAVX512. VMAXPS takes its second source when
// either is NaN or both are zeros, so its fold matches Go's max only away
// from those: a NaN seen, or a zero maximum (whose sign the lanes' order
// decides), goes to the reference.
func maxAsm(x []float32) (float32, bool) {
	if !useFloatAVX512 || len(x) == 0 {
		return 0, false
	}
	m, nan := maxAVX512(&x[0], len(x))
	if nan || m == 0 {
		return 0, false
	}
	return m, true
}

func scaleAsm(x []float32, s float32) bool {
	if !useFloatAVX512 {
		return false
	}
	scaleAVX512(&x[0], len(x), s)
	return true
}
