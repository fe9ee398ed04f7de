//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestQWidenRows checks the AVX2 kernel's Q8 widening against its
// definition: a uint16 per code, in order, over row ranges that start past
// row 0, and nothing written past the rows.
func TestQWidenRows(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	rng := rand.New(rand.NewPCG(49, 50))
	for _, enc := range []Encoding{Q8} {
		for _, shape := range [][3]int{{1, 1, 0}, {3, 2, 1}, {5, 9, 2}, {4, 33, 3}} {
			rows, groups, lo := shape[0], shape[1], shape[2]
			m := rawQMatrix(rng, enc, lo+rows, groups*GroupSize, codesRandom)
			buf := make([]byte, 2*rows*m.Cols+64)
			for i := range buf {
				buf[i] = 0xAA
			}
			buf = qWidenRows(buf[:0], m, lo, lo+rows)[:cap(buf)]
			got := unsafe.Slice((*uint16)(unsafe.Pointer(&buf[0])), rows*m.Cols)
			for r := range rows {
				for g := range groups {
					for i := range GroupSize {
						want := codeInKernelOrder(m, lo+r, g, i)
						if v := got[(r*groups+g)*GroupSize+i]; v != uint16(want) {
							t.Fatalf("%v rows [%d,%d) groups %d: row %d group %d code %d: got %d, want %d", enc, lo, lo+rows, groups, r, g, i, v, want)
						}
					}
				}
			}
			for i := 2 * rows * m.Cols; i < len(buf); i++ {
				if buf[i] != 0xAA {
					t.Fatal(fmt.Sprintf("%v: byte %d past the rows written", enc, i))
				}
			}
		}
	}
}

// codeInKernelOrder is code i of group g of row r of a Q8 matrix.
func codeInKernelOrder(m *Matrix, r, g, i int) byte { return m.Data[r*m.Cols+g*GroupSize+i] }
