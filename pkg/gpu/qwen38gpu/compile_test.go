package qwen38gpu

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

// The second module (gpukernels' source and the qwen4_exp kernels)
// compiles with NVRTC and the engine's options for Hopper and Turing, on
// any machine that has NVRTC, with or without a GPU; every kernel the
// engine looks up is defined in it.
func TestSourceCompiles(t *testing.T) {
	src := Source()
	for _, n := range Names {
		if !strings.Contains(src, "__global__ void "+n+"(") && !strings.Contains(src, "__global__ void __launch_bounds__(128) "+n+"(") {
			t.Errorf("kernel %s is not defined in the source", n)
		}
	}
	libs, err := cuda.FindLibraries()
	if err != nil {
		t.Skipf("no NVRTC here: %v", err)
	}
	for _, arch := range []int{75, 90} {
		cubin, err := cuda.Compile(libs, src, "nvmai_qwen38.cu", arch)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("sm_%d: %d bytes of cubin (NVRTC %s)", arch, len(cubin), libs.NVRTC)
	}
}
