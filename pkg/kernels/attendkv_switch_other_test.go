//go:build !amd64 || purego

package kernels

func floatAsmLevels() []floatAsmLevel { return []floatAsmLevel{{"reference", false, false}} }

func (floatAsmLevel) set() (restore func()) { return func() {} }
