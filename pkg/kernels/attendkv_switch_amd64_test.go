//go:build !purego

package kernels

func floatAVX512Flag() bool  { return useFloatAVX512 }
func setFloatAVX512(on bool) { useFloatAVX512 = on }
