//go:build !purego

package kernels

// floatAsmLevels lists the float kernels' implementations this CPU runs:
// each sets the flags for one and returns a function restoring them.
func floatAsmLevels() []floatAsmLevel {
	levels := []floatAsmLevel{{"reference", false, false}}
	if hasAVX2 {
		levels = append(levels, floatAsmLevel{"AVX2", false, true})
	}
	if hasAVX512 {
		levels = append(levels, floatAsmLevel{"AVX-512", true, true})
	}
	return levels
}

func (l floatAsmLevel) set() (restore func()) {
	saved512, saved2 := useFloatAVX512, useFloatAVX2
	useFloatAVX512, useFloatAVX2 = l.avx512, l.avx2
	return func() { useFloatAVX512, useFloatAVX2 = saved512, saved2 }
}
