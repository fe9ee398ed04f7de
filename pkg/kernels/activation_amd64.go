//go:build !purego

package kernels

// activateAVX512 is activateGeneric over n values, 16 lanes at a time with a
// masked tail; y may be nil unless mode needs it.
//
//go:noescape
func activateAVX512(dst, x, y *float32, n, mode int)

// activateAVX2 is activateGeneric over n values, n a multiple of 8.
//
//go:noescape
func activateAVX2(dst, x, y *float32, n, mode int)

func activateAsm(dst, x, y []float32, mode int) bool {
	n := len(dst)
	if !useFloatAVX512 && !(useFloatAVX2 && n >= floatBlockAVX2) {
		return false
	}
	_, _ = dst[n-1], x[n-1]
	yp := &x[0] // never read unless mode needs y
	if y != nil {
		_ = y[n-1]
		yp = &y[0]
	}
	if useFloatAVX512 {
		activateAVX512(&dst[0], &x[0], yp, n, mode)
		return true
	}
	// AVX2 has no masked tail: the last n mod 8 values take the reference,
	// which gives each value the same bits.
	body := n &^ (floatBlockAVX2 - 1)
	activateAVX2(&dst[0], &x[0], yp, body, mode)
	if body < n {
		var yt []float32
		if y != nil {
			yt = y[body:]
		}
		activateGeneric(dst[body:], x[body:], yt, mode)
	}
	return true
}

func expAsm(dst, x []float32, shift float32) bool {
	n := len(dst)
	if !useFloatAVX512 && !(useFloatAVX2 && n >= floatBlockAVX2) {
		return false
	}
	_, _ = dst[n-1], x[n-1]
	if useFloatAVX512 {
		activateAVX512(&dst[0], &x[0], &shift, n, actExp)
		return true
	}
	body := n &^ (floatBlockAVX2 - 1)
	activateAVX2(&dst[0], &x[0], &shift, body, actExp)
	expGeneric(dst[body:], x[body:], shift)
	return true
}
