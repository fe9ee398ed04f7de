//go:build !purego

package kernels

func useBF16AVX2Flag() bool { return useBF16AVX2 }
func setBF16AVX2(on bool)   { useBF16AVX2 = on }

// useFloatAVX512Flag sets useFloatAVX512 and returns what it was.
func useFloatAVX512Flag(on bool) bool {
	was := useFloatAVX512
	useFloatAVX512 = on && hasAVX512
	return was
}
