//go:build !purego

package kernels

func useBF16AVX2Flag() bool { return useBF16AVX2 }
func setBF16AVX2(on bool)   { useBF16AVX2 = on }
