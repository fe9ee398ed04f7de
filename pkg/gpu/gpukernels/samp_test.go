package gpukernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/sample"
)

// SAMP_BLOCK is sample.Block: the two sides add the same numbers in the
// same order only when they block a row alike.
func TestSampBlockIsTheSamplers(t *testing.T) {
	if SampBlock != sample.Block {
		t.Fatalf("SampBlock %d, sample.Block %d", SampBlock, sample.Block)
	}
	if !containsLine(Source, "#define SAMP_BLOCK 512") || SampBlock != 512 {
		t.Fatal("kernels.cu's SAMP_BLOCK is not SampBlock")
	}
	if !containsLine(Source, "#define SAMP_CAP 1024") || SampCap != 1024 {
		t.Fatal("kernels.cu's SAMP_CAP is not SampCap")
	}
}

// pexp is sample.Exp bit for bit over its range: what sampling on the
// device rests on.
func TestPExpIsSampleExp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	xs := []float64{0, math.Copysign(0, -1), 1e-300, -1e-300, -1e-9, -0.5, -1, -20, -87.3, -700, -708.4, -709,
		-720, -744, -745.13, -746, 1, 20, 700, 710, math.Inf(-1), math.Inf(1), math.NaN()}
	for range 1 << 16 {
		xs = append(xs, -r.Float64()*30, -r.Float64()*745, r.NormFloat64(), r.Float64()*700)
	}
	bits := make([]uint64, len(xs))
	for i, x := range xs {
		bits[i] = math.Float64bits(x)
	}
	got, back := make([]uint64, len(xs)), make([]uint64, len(xs))
	withGPU(t, func(b *gpuBuf, l *Launcher) { // no t.Fatal on the device's goroutine
		in, out := b.up(cuda.Bytes(bits)), b.poisoned(8*len(xs))
		if err := l.PExp(out, in, len(xs)); err != nil {
			t.Error(err)
			return
		}
		if err := b.c.DtoH(cuda.Bytes(got), out); err != nil {
			t.Error(err)
		}
		if err := b.c.DtoH(cuda.Bytes(back), in); err != nil {
			t.Error(err)
		}
	})
	bad := 0
	for i, x := range xs {
		if want := math.Float64bits(sample.Exp(x)); got[i] != want {
			if bad++; bad <= 8 {
				t.Errorf("index %d: pexp(%v) bits %#x (input on the device %#x, sent %#x), sample.Exp %#x", i, x, got[i], back[i], bits[i], want)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d points differ", bad, len(xs))
	}
	t.Logf("pexp equals sample.Exp bitwise at %d points", len(xs))
}

func containsLine(src, line string) bool {
	for _, l := range strings.Split(src, "\n") {
		if strings.TrimSpace(strings.SplitN(l, "//", 2)[0]) == line {
			return true
		}
	}
	return false
}
