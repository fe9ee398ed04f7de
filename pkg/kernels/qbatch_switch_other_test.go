//go:build !amd64 || purego

package kernels

import "testing"

func withEachQBatchKernel(t *testing.T, f func(t *testing.T)) { f(t) }

func qBatchKernelNames() []string { return nil }

func useQBatchKernel(string) func() { return func() {} }

func qUnpackQ4Variants() []bool { return nil }

func forEachQuantizer(t *testing.T, f func(t *testing.T)) { t.Run("Go", f) }
