package gpukernels

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

// The kernels compile with NVRTC and the engine's options, for Hopper (with
// programmatic dependent launch and integer mma) and Turing (neither), on
// any machine that has NVRTC, with or without a GPU.
func TestSourceCompiles(t *testing.T) {
	libs, err := cuda.FindLibraries()
	if err != nil {
		t.Skipf("no NVRTC here: %v", err)
	}
	for _, arch := range []int{75, 90} {
		cubin, err := cuda.Compile(libs, Source, "nvmai_kernels.cu", arch)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("sm_%d: %d bytes of cubin (NVRTC %s)", arch, len(cubin), libs.NVRTC)
	}
}
