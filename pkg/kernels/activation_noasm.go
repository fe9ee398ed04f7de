//go:build !amd64 || purego

package kernels

func activateAsm(dst, x, y []float32, mode int) bool { return false }

func expAsm(dst, x []float32, shift float32) bool { return false }
