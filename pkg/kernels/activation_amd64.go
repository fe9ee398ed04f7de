//go:build !purego

package kernels

// activateAVX512 is activateGeneric over n values, 16 lanes at a time with a
// masked tail; y may be nil unless mode needs it.
//
//go:noescape
func activateAVX512(dst, x, y *float32, n, mode int)

func activateAsm(dst, x, y []float32, mode int) bool {
	if !useFloatAVX512 {
		return false
	}
	n := len(dst)
	_, _ = dst[n-1], x[n-1]
	yp := &x[0] // never read unless mode needs y
	if y != nil {
		_ = y[n-1]
		yp = &y[0]
	}
	activateAVX512(&dst[0], &x[0], yp, n, mode)
	return true
}

func expAsm(dst, x []float32, shift float32) bool {
	if !useFloatAVX512 {
		return false
	}
	n := len(dst)
	_, _ = dst[n-1], x[n-1]
	activateAVX512(&dst[0], &x[0], &shift, n, actExp)
	return true
}
