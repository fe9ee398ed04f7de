package main

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"

	"github.com/ebitengine/purego"
)

// runSelftest quantizes test rows with this program's Q4_0/Q8_0 code and
// with ggml_quantize_chunk from libggml-base.so, and fails unless every
// block is identical.
func runSelftest(libDir string) error {
	lib, err := purego.Dlopen(filepath.Join(libDir, "libggml-base.so"), purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("load libggml-base.so from %s (run scripts/vs-llamacpp.sh once to install node-llama-cpp, or pass --lib-dir): %w", libDir, err)
	}
	// size_t ggml_quantize_chunk(enum ggml_type, const float *src, void *dst,
	//                            int64_t start, int64_t nrows, int64_t n_per_row, const float *imatrix)
	var quantizeChunk func(typ int32, src *float32, dst *byte, start, nrows, nPerRow int64, imatrix *float32) uintptr
	purego.RegisterLibFunc(&quantizeChunk, lib, "ggml_quantize_chunk")
	const perRow = 2048
	bad := 0
	for _, c := range selftestCases(perRow) {
		for _, ty := range []ggmlType{typeQ4_0, typeQ8_0} {
			rows := len(c.x) / perRow
			want := make([]byte, len(c.x)/ty.block*ty.blockBytes)
			n := quantizeChunk(int32(ty.id), &c.x[0], &want[0], 0, int64(rows), perRow, nil)
			t := tensor{typ: ty}
			got := t.encode(nil, c.x)
			diff := 0
			for b := 0; b < len(want); b += ty.blockBytes {
				if !bytes.Equal(want[b:b+ty.blockBytes], got[b:b+ty.blockBytes]) {
					diff++
				}
			}
			status := "identical"
			if int(n) != len(want) || diff > 0 {
				status = fmt.Sprintf("%d of %d blocks differ (ggml wrote %d B)", diff, len(want)/ty.blockBytes, n)
				bad++
			}
			fmt.Printf("selftest %s %-8s %6d blocks: %s\n", ty.name, c.name, len(want)/ty.blockBytes, status)
		}
	}
	if bad > 0 {
		return fmt.Errorf("the quantizers differ from ggml's in %d case(s)", bad)
	}
	return nil
}

type selftestCase struct {
	name string
	x    []float32
}

// selftestCases are random rows plus the edges where rounding decides:
// exact halves, |max| = |min| ties in both orders, zero and −0 blocks,
// values just below one half.
func selftestCases(perRow int) []selftestCase {
	r := rng{s: 1234}
	uniform := make([]float32, 256*perRow)
	for i := range uniform {
		uniform[i] = float32(float64(r.next()>>11)*0x1p-53*0.08 - 0.04)
	}
	normal := make([]float32, 256*perRow)
	for i := range normal {
		u1, u2 := float64(r.next()>>11)*0x1p-53, float64(r.next()>>11)*0x1p-53
		normal[i] = float32(math.Sqrt(-2*math.Log(u1+1e-300)) * math.Cos(2*math.Pi*u2))
	}
	ties := make([]float32, 256*perRow)
	for i := range ties {
		ties[i] = float32(int(r.next()%17)-8) * 0.25
	}
	edges := make([]float32, 64*perRow)
	for row := 0; row < 64; row++ {
		e := edges[row*perRow : (row+1)*perRow]
		for j := range e {
			e[j] = float32(j%32-16) + 0.5
			if j%32 == 0 {
				e[j] = 127
				if row%2 == 1 {
					e[j] = -127
				}
			}
		}
	}
	clear(edges[perRow : perRow+32])
	for j := 0; j < 32; j++ {
		edges[2*perRow+j] = 0.49999997
		edges[5*perRow+j] = -8 + 16*float32(j)/31
		edges[6*perRow+j] = float32(math.Copysign(0, -1))
	}
	edges[2*perRow] = 127
	edges[3*perRow], edges[3*perRow+5] = 3, -3
	edges[4*perRow], edges[4*perRow+5] = -3, 3
	return []selftestCase{{"uniform", uniform}, {"normal", normal}, {"ties", ties}, {"edges", edges}}
}
