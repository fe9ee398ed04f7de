package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// guardedCopy copies b into memory that ends exactly at an inaccessible
// page, so a kernel reading one byte past its end faults.
func guardedCopy(t *testing.T, b []byte) []byte {
	t.Helper()
	page := unix.Getpagesize()
	size := (len(b)+page-1)/page*page + page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap %d bytes: %v", size, err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Mprotect(mem[size-page:], unix.PROT_NONE); err != nil {
		t.Fatalf("mprotect guard page: %v", err)
	}
	out := mem[size-page-len(b) : size-page : size-page]
	copy(out, b)
	return out
}

// TestQKernelsStopAtRowEnd puts weights, scales and biases flush against a
// guard page: every partial-block width must read nothing past the matrix.
func TestQKernelsStopAtRowEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	impls := append([]qImplementation{{"generic", qRowsGeneric}}, qImplementations...)
	for _, impl := range impls {
		for _, enc := range quantEncodings {
			for groups := 1; groups <= 33; groups++ {
				m := rawQMatrix(rng, enc, 2+groups%2, groups*GroupSize, codesRandom)
				want := make([]float32, m.Rows)
				qa := QuantizeActivation(randomVector(rng, m.Cols))
				qRowsGeneric(want, m, qa, 0, 0, m.Rows)
				m.Data, m.Scales, m.Biases = guardedCopy(t, m.Data), guardedCopy(t, m.Scales), guardedCopy(t, m.Biases)
				got := make([]float32, m.Rows)
				impl.rows(got, m, qa, 0, 0, m.Rows)
				assertSameFloats(t, fmt.Sprintf("%s %v %d groups at a guard page", impl.name, enc, groups), got, want)
			}
		}
	}
}
