// Package cudatest holds what the GPU packages' tests share: skipping, with
// the reason, where no GPU is usable, and failing instead under
// NVMAI_GPU=1, which the GPU machine's scripts set so that a GPU test never
// passes by skipping there.
package cudatest

import (
	"os"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

var (
	once    sync.Once
	openErr error
)

// Need skips the test unless device 0 opens (tried once per test binary);
// NVMAI_GPU=1 turns the skip into a failure.
func Need(t testing.TB) {
	t.Helper()
	once.Do(func() {
		dev, err := cuda.Open(0)
		if err == nil {
			dev.Close()
		}
		openErr = err
	})
	Unusable(t, openErr)
}

// Unusable skips the test when err, why the GPU cannot serve it, is not
// nil; NVMAI_GPU=1 turns the skip into a failure.
func Unusable(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("NVMAI_GPU") == "1" {
		t.Fatalf("NVMAI_GPU=1 but no usable GPU: %v", err)
	}
	t.Skipf("no usable GPU: %v", err)
}
