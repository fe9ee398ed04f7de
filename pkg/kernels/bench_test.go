package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/nvmai/nvmai/internal/hugemem"
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
				sink += SumWords(buf)
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

// fastBenchShapes are the integer path's benchmark shapes: square, the MoE
// expert projections (512×2048 gate/up, 2048×512 down) and one far beyond
// L2 and L3 (8192×4096: 18 MiB at Q4, 34 MiB at Q8).
var fastBenchShapes = [][2]int{{2048, 2048}, {512, 2048}, {2048, 512}, {8192, 4096}}

func benchMatVecFast(b *testing.B, enc Encoding) {
	for _, shape := range fastBenchShapes {
		rng := rand.New(rand.NewPCG(1, 2))
		m := rawQMatrix(rng, enc, shape[0], shape[1], codesRandom)
		x := randomVector(rng, shape[1])
		dst := make([]float32, shape[0])
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%dx%d/threads=%d", shape[0], shape[1], threads), func(b *testing.B) {
				p := NewPool(threads)
				defer p.Close()
				b.SetBytes(weightBytes(m))
				for b.Loop() {
					p.MatVecFast(dst, m, x)
				}
			})
		}
	}
}

// MatVecFast throughput in weight bytes/s; compare each with
// BenchmarkMemReadShapes of the same encoding, shape and threads, run
// interleaved (scripts: run the test binary alternately, see the report).
func BenchmarkMatVecFastQ4(b *testing.B) { benchMatVecFast(b, Q4) }
func BenchmarkMatVecFastQ8(b *testing.B) { benchMatVecFast(b, Q8) }

// BenchmarkMemReadShapes is BenchmarkMemRead at the size of each
// fastBenchShapes matrix, on 1 and 2 goroutines (each summing half).
func BenchmarkMemReadShapes(b *testing.B) {
	for _, enc := range []Encoding{Q4, Q8} {
		for _, shape := range fastBenchShapes {
			size := matrixBytes(enc, shape[0], shape[1])
			buf := make([]uint64, size/8)
			for i := range buf {
				buf[i] = uint64(i)
			}
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%v/%dx%d/threads=%d", enc, shape[0], shape[1], threads), func(b *testing.B) {
					b.SetBytes(int64(size))
					sums := make([]uint64, threads)
					for b.Loop() {
						sumSplit(buf, sums)
					}
				})
			}
		}
	}
}

// sumSplit sums buf with len(sums) goroutines (the caller is one of them).
func sumSplit(buf []uint64, sums []uint64) {
	n := len(sums)
	if n == 1 {
		sums[0] += SumWords(buf)
		return
	}
	var wg sync.WaitGroup
	for t := 1; t < n; t++ {
		wg.Go(func() { sums[t] += SumWords(buf[len(buf)*t/n : len(buf)*(t+1)/n]) })
	}
	sums[0] += SumWords(buf[:len(buf)/n])
	wg.Wait()
}

func BenchmarkQuantizeActivation(b *testing.B) {
	for _, cols := range []int{512, 2048, 4096} {
		b.Run(fmt.Sprint(cols), func(b *testing.B) {
			x := randomVector(rand.New(rand.NewPCG(1, 2)), cols)
			qa := new(QActivation)
			b.SetBytes(int64(4 * cols))
			for b.Loop() {
				qa.Quantize(x, cols)
			}
		})
	}
}

// BenchmarkQKernels runs each integer kernel directly (activation already
// quantized, no pool) on in-L2 matrices: compute throughput, not memory.
func BenchmarkQKernels(b *testing.B) {
	impls := append([]qImplementation{}, qImplementations...)
	for _, enc := range quantEncodings {
		for _, shape := range [][2]int{{256, 512}, {64, 2048}, {32, 4096}} {
			rng := rand.New(rand.NewPCG(3, 4))
			m := rawQMatrix(rng, enc, shape[0], shape[1], codesRandom)
			qa := QuantizeActivation(randomVector(rng, shape[1]))
			dst := make([]float32, shape[0])
			for _, impl := range impls {
				b.Run(fmt.Sprintf("%s/%v/%dx%d", impl.name, enc, shape[0], shape[1]), func(b *testing.B) {
					b.SetBytes(weightBytes(m))
					for b.Loop() {
						impl.rows(dst, m, qa, 0, 0, m.Rows)
					}
				})
			}
		}
	}
}

// BenchmarkMatMulFastQ4 is a prefill of 8 tokens over the out-of-cache
// shape. SetBytes counts the weights once per token, so a rate above
// BenchmarkMatVecFastQ4's shows the row chunks reusing weights from L2.
func BenchmarkMatMulFastQ4(b *testing.B) {
	const tokens = 8
	rng := rand.New(rand.NewPCG(1, 2))
	m := rawQMatrix(rng, Q4, 8192, 4096, codesRandom)
	x := randomVector(rng, tokens*m.Cols)
	dst := make([]float32, tokens*m.Rows)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("8192x4096/tokens=%d/threads=%d", tokens, threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			b.SetBytes(tokens * weightBytes(m))
			for b.Loop() {
				p.MatMulFast(dst, m, x, tokens)
			}
		})
	}
}

// BenchmarkMatVecFastVsRead alternates, within one process and repetition by
// repetition, MatVecFast and a plain read (SumWords, as BenchmarkMemRead)
// of the same number of bytes, and reports the median of each in GB/s and
// their ratio: on a shared, noisy machine this is steadier than comparing
// separate benchmark runs. 16384×8192 (72 MiB at Q4) is far beyond L3.
// pages=2M puts the matrix and the read buffer in huge-page memory, as the
// runtime holds weights; pages=4K in the Go heap, for comparison.
func BenchmarkMatVecFastVsRead(b *testing.B) {
	for _, enc := range quantEncodings {
		for _, shape := range [][2]int{{8192, 4096}, {16384, 8192}} {
			rng := rand.New(rand.NewPCG(5, 6))
			heapM := rawQMatrix(rng, enc, shape[0], shape[1], codesRandom)
			x := randomVector(rng, shape[1])
			dst := make([]float32, shape[0])
			size := weightBytes(heapM)
			for _, pages := range []string{"2M", "4K"} {
				m, buf := heapM, make([]uint64, size/8)
				if pages == "2M" {
					var free func()
					m, buf, free = hugeCopy(b, heapM)
					defer free()
				}
				for i := range buf {
					buf[i] = uint64(i)
				}
				for _, threads := range []int{1, 2} {
					name := fmt.Sprintf("%v/%dx%d/threads=%d/pages=%s", enc, shape[0], shape[1], threads, pages)
					b.Run(name, func(b *testing.B) { kernelVsRead(b, m, x, dst, buf, threads) })
				}
			}
		}
	}
}

func kernelVsRead(b *testing.B, m *Matrix, x, dst []float32, buf []uint64, threads int) {
	p := NewPool(threads)
	defer p.Close()
	size := weightBytes(m)
	sums := make([]uint64, threads)
	var kernel, read []float64
	for b.Loop() {
		t0 := time.Now()
		p.MatVecFast(dst, m, x)
		t1 := time.Now()
		sumSplit(buf, sums)
		t2 := time.Now()
		kernel = append(kernel, float64(size)/t1.Sub(t0).Seconds()/1e9)
		read = append(read, float64(size)/t2.Sub(t1).Seconds()/1e9)
	}
	k, r := median(kernel), median(read)
	b.ReportMetric(k, "kernel-GB/s")
	b.ReportMetric(r, "read-GB/s")
	b.ReportMetric(100*k/r, "kernel/read-%")
}

// hugeCopy copies m into huge-page memory laid out as an install lays a
// tensor out (codes, then scales, then biases), and returns it with a
// plain-read buffer of the same size, also in huge pages.
func hugeCopy(b *testing.B, m *Matrix) (*Matrix, []uint64, func()) {
	size := int(weightBytes(m))
	weights, err := hugemem.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	read, err := hugemem.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	w := weights.Bytes
	c := *m
	c.Data = w[:len(m.Data):len(m.Data)]
	c.Scales = w[len(m.Data) : len(m.Data)+len(m.Scales) : len(m.Data)+len(m.Scales)]
	c.Biases = w[len(m.Data)+len(m.Scales):]
	copy(c.Data, m.Data)
	copy(c.Scales, m.Scales)
	copy(c.Biases, m.Biases)
	buf := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(read.Bytes))), size/8)
	return &c, buf, func() { weights.Free(); read.Free() }
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkExpertStream replays one MoE layer's routed experts as decode
// reads them: a huge-page slab of 256 Qwen3.5-35B-A3B experts (gate and up
// 512×2048, down 2048×512, Q4), 8 random experts per step, gate and up as
// one job, then down. It reports the weights' GB/s next to a plain read of
// the same slab, so per-matrix costs (short streams, pool hand-offs,
// activation quantization) show up that the single-matrix benchmarks miss.
func BenchmarkExpertStream(b *testing.B) {
	const experts, topK, inter, hidden = 256, 8, 512, 2048
	rng := rand.New(rand.NewPCG(9, 10))
	proto := []*Matrix{rawQMatrix(rng, Q4, inter, hidden, codesRandom), rawQMatrix(rng, Q4, inter, hidden, codesRandom),
		rawQMatrix(rng, Q4, hidden, inter, codesRandom)}
	stride := 0
	for _, m := range proto {
		stride += int(weightBytes(m))
	}
	slab, err := hugemem.Alloc(experts * stride)
	if err != nil {
		b.Fatal(err)
	}
	defer slab.Free()
	mats := make([][3]*Matrix, experts)
	for e := range experts {
		off := e * stride
		for i, m := range proto {
			c := *m
			for _, f := range []*[]byte{&c.Data, &c.Scales, &c.Biases} {
				n := len(*f)
				dst := slab.Bytes[off : off+n : off+n]
				copy(dst, *f)
				*f, off = dst, off+n
			}
			mats[e][i] = &c
		}
	}
	read := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(slab.Bytes))), len(slab.Bytes)/8)
	x := randomVector(rng, hidden)
	gate, up, down := make([]float32, inter), make([]float32, inter), make([]float32, hidden)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			p := NewPool(threads)
			defer p.Close()
			sums := make([]uint64, threads)
			var kernel, plain []float64
			for b.Loop() {
				t0 := time.Now()
				for range topK {
					m := mats[rng.IntN(experts)]
					p.MatMulFastMulti([][]float32{gate, up}, m[:2], x, 1)
					p.MatVecFast(down, m[2], gate)
				}
				t1 := time.Now()
				for range topK {
					e := rng.IntN(experts)
					sumSplit(read[e*stride/8:(e+1)*stride/8], sums)
				}
				t2 := time.Now()
				kernel = append(kernel, float64(topK*stride)/t1.Sub(t0).Seconds()/1e9)
				plain = append(plain, float64(topK*stride)/t2.Sub(t1).Seconds()/1e9)
			}
			k, r := median(kernel), median(plain)
			b.ReportMetric(k, "kernel-GB/s")
			b.ReportMetric(r, "read-GB/s")
			b.ReportMetric(100*k/r, "kernel/read-%")
		})
	}
}
