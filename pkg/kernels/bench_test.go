package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchRows×benchCols is a 4096×4096 projection: 8.5 MiB at Q4 with its
// scales and biases, 32 MiB at BF16, so it streams from DRAM rather than L2.
const benchRows, benchCols = 4096, 4096

func weightBytes(m *Matrix) int64 { return int64(len(m.Data) + len(m.Scales) + len(m.Biases)) }

func benchMatVec(b *testing.B, enc Encoding, threads int) {
	rng := rand.New(rand.NewPCG(1, 2))
	m := randomMatrix(b, rng, enc, benchRows, benchCols)
	x := randomVector(rng, benchCols)
	dst := make([]float32, benchRows)
	p := NewPool(threads)
	defer p.Close()
	b.SetBytes(weightBytes(m))
	b.ResetTimer()
	for b.Loop() {
		p.MatVec(dst, m, x)
	}
}

// MatVec throughput in weight bytes/s (MB/s column); compare with
// BenchmarkMemRead over the same number of bytes.
func BenchmarkMatVecQ4(b *testing.B)   { benchMatVec(b, Q4, 1) }
func BenchmarkMatVecQ8(b *testing.B)   { benchMatVec(b, Q8, 1) }
func BenchmarkMatVecBF16(b *testing.B) { benchMatVec(b, BF16, 1) }

func BenchmarkPoolMatVecQ4(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) { benchMatVec(b, Q4, threads) })
	}
}

// BenchmarkMemRead sums a buffer as large as each MatVec benchmark's
// weights, 8 bytes at a time with 4 accumulators: the memory-bound ceiling.
func BenchmarkMemRead(b *testing.B) {
	for _, enc := range []Encoding{Q4, Q8, BF16} {
		size := matrixBytes(enc, benchRows, benchCols)
		b.Run(enc.String(), func(b *testing.B) {
			buf := make([]uint64, size/8)
			for i := range buf {
				buf[i] = uint64(i)
			}
			b.SetBytes(int64(size))
			var sink uint64
			for b.Loop() {
				sink += sumWords(buf)
			}
			if sink == 1 {
				b.Log(sink)
			}
		})
	}
}

func matrixBytes(enc Encoding, rows, cols int) int {
	switch enc {
	case Q4:
		return rows*cols/2 + 2*rows*cols/GroupSize*2
	case Q8:
		return rows*cols + 2*rows*cols/GroupSize*2
	}
	return rows * cols * 2
}

func sumWords(buf []uint64) uint64 {
	var a, b, c, d uint64
	for i := 0; i+4 <= len(buf); i += 4 {
		v := buf[i : i+4 : i+4]
		a += v[0]
		b += v[1]
		c += v[2]
		d += v[3]
	}
	return a + b + c + d
}
