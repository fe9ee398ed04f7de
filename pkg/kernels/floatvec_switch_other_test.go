//go:build !amd64 || purego

package kernels

func useBF16AVX2Flag() bool { return false }
func setBF16AVX2(bool)      {}

func useFloatAVX512Flag(bool) bool { return false }
