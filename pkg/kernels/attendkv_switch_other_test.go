//go:build !amd64 || purego

package kernels

func floatAVX512Flag() bool { return false }
func setFloatAVX512(bool)   {}
