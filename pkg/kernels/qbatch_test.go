package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestQBatchBitwise runs the batched path (qMatMulBatched) against
// qRowsGeneric token by token: rows 1..19 and a few wider (the tail of rows
// past a multiple of 8 and several row chunks), groups 1..33 (every tail of a
// block of 16, odd groups for Q4's pairs), tokens 1..33 (every tail of a block
// of 16), random and extreme codes and activations, and row ranges that
// leave other rows alone. Under -tags purego or without AVX-512 VNNI or AVX2 there is
// no batched kernel, and the test checks the path it falls back to.
func TestQBatchBitwise(t *testing.T) {
	if !qBatchAvailable {
		t.Log("no batched kernel in this build or on this CPU: checking the token-by-token path")
	}
	withEachQBatchKernel(t, testQBatchBitwise)
}

func testQBatchBitwise(t *testing.T) {
	defer func(c int) { matMulChunkBytes = c }(matMulChunkBytes)
	rng := rand.New(rand.NewPCG(41, 42))
	styles := []codeStyle{codesRandom, codesMax, codesZero, codesExtreme}
	type shape struct{ rows, groups, tokens int }
	var shapes []shape
	for rows := 1; rows <= 19; rows++ {
		shapes = append(shapes, shape{rows, 1 + rows%5, 4 + rows})
	}
	for groups := 1; groups <= 33; groups++ {
		shapes = append(shapes, shape{8 + groups%3*8, groups, 1 + groups%17})
	}
	for tokens := 1; tokens <= 33; tokens++ {
		shapes = append(shapes, shape{16, 3 + tokens%4, tokens})
	}
	shapes = append(shapes, shape{64, 32, 20}, shape{40, 8, 37}, shape{24, 48, 5}, shape{136, 2, 16})
	for i, sh := range shapes {
		for _, enc := range quantEncodings {
			style := styles[i%len(styles)]
			m := rawQMatrix(rng, enc, sh.rows, sh.groups*GroupSize, style)
			x := edgyVector(rng, sh.tokens*m.Cols)
			qa := new(QActivation)
			qa.Quantize(x, m.Cols)
			want := make([]float32, sh.tokens*m.Rows)
			for tok := range sh.tokens {
				qRowsGeneric(want[tok*m.Rows:(tok+1)*m.Rows], m, qa, tok, 0, m.Rows)
			}
			// Small chunks too, so that one call spans several row chunks.
			for _, chunkBytes := range []int{128 << 10, 1} {
				matMulChunkBytes = chunkBytes
				what := fmt.Sprintf("%v %d×%d, %d tokens, style %d, chunk %d", enc, m.Rows, m.Cols, sh.tokens, style, chunkBytes)
				got := make([]float32, len(want))
				MatMulQ(got, m, qa)
				assertSameFloats(t, what, got, want)
				if qBatchAvailable { // below qBatchMinTokens too
					clear(got)
					qMatMulBatched(got, m, qa, 0, m.Rows)
					assertSameFloats(t, what+" (qMatMulBatched)", got, want)
				}
				if m.Rows >= 10 {
					lo, hi := 1, m.Rows-1
					const sentinel = float32(-12345)
					for i := range got {
						got[i] = sentinel
					}
					qMatMulRows(got, m, qa, lo, hi)
					for tok := range sh.tokens {
						row := got[tok*m.Rows : (tok+1)*m.Rows]
						assertSameFloats(t, what+" rows [1, Rows-1)", row[lo:hi], want[tok*m.Rows+lo:tok*m.Rows+hi])
						if row[0] != sentinel || row[hi] != sentinel {
							t.Fatalf("%s token %d: rows outside [%d, %d) were written", what, tok, lo, hi)
						}
					}
				}
			}
			matMulChunkBytes = 128 << 10
		}
	}
}

// TestQBatchReusedActivation quantizes a narrower batch into a QActivation
// that held a wider one: the batched layout must be rebuilt, and the padding
// past the last token and group must not leak into the results.
func TestQBatchReusedActivation(t *testing.T) { withEachQBatchKernel(t, testQBatchReusedActivation) }

func testQBatchReusedActivation(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	qa := new(QActivation)
	for _, sh := range [][3]int{{16, 20, 37}, {16, 3, 5}, {24, 17, 16}, {8, 1, 4}} {
		for _, enc := range quantEncodings {
			m := rawQMatrix(rng, enc, sh[0], sh[1]*GroupSize, codesRandom)
			qa.Quantize(edgyVector(rng, sh[2]*m.Cols), m.Cols)
			want := make([]float32, sh[2]*m.Rows)
			for tok := range sh[2] {
				qRowsGeneric(want[tok*m.Rows:(tok+1)*m.Rows], m, qa, tok, 0, m.Rows)
			}
			got := make([]float32, len(want))
			MatMulQ(got, m, qa)
			assertSameFloats(t, fmt.Sprintf("%v %d×%d, %d tokens", enc, m.Rows, m.Cols, sh[2]), got, want)
		}
	}
}

// TestQUnpackQ4 checks the Q4 unpacking kernels (AVX-512, AVX2) against
// their definition: each group's 32 low nibbles (even elements) then its 32
// high ones.
func TestQUnpackQ4(t *testing.T) {
	variants := qUnpackQ4Variants()
	if len(variants) == 0 {
		t.Skip("no batched kernel in this build or on this CPU")
	}
	for _, avx2 := range variants {
		checkQUnpackQ4(t, avx2)
	}
}

func checkQUnpackQ4(t *testing.T, avx2 bool) {
	rng := rand.New(rand.NewPCG(45, 46))
	for rows := 1; rows <= 3; rows++ {
		for groups := 1; groups <= 9; groups++ {
			w := make([]byte, rows*groups*GroupSize/2+64)
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
			got := make([]byte, rows*groups*GroupSize+64)
			for i := range got {
				got[i] = 0xAA
			}
			qUnpackQ4(got, w, rows, groups, avx2)
			for r := range rows {
				for g := range groups {
					src := w[(r*groups+g)*GroupSize/2:]
					dst := got[(r*groups+g)*GroupSize:]
					for k := range GroupSize / 2 {
						if dst[k] != src[k]&15 || dst[GroupSize/2+k] != src[k]>>4 {
							t.Fatalf("avx2 %v, rows %d groups %d: row %d group %d byte %d: got %#x %#x from %#x", avx2, rows, groups, r, g, k, dst[k], dst[GroupSize/2+k], src[k])
						}
					}
				}
			}
			for i := rows * groups * GroupSize; i < len(got); i++ {
				if got[i] != 0xAA {
					t.Fatalf("rows %d groups %d: byte %d past the end written", rows, groups, i)
				}
			}
		}
	}
}

// BenchmarkQBatch compares the batched path with the token-by-token one on
// the MoE shapes (expert gate/up 512×2048, down 2048×512) and a projection,
// one thread, matrices in L2, for a few token counts: ns per token-row.
func BenchmarkQBatch(b *testing.B) {
	defer func(e bool) { qBatchEnabled = e }(qBatchEnabled)
	for _, enc := range quantEncodings {
		for _, shape := range [][2]int{{512, 2048}, {2048, 512}, {4096, 2048}} {
			for _, tokens := range []int{2, 4, 8, 16, 64} {
				rng := rand.New(rand.NewPCG(5, 6))
				m := rawQMatrix(rng, enc, shape[0], shape[1], codesRandom)
				qa := new(QActivation)
				qa.Quantize(randomVector(rng, tokens*shape[1]), shape[1])
				dst := make([]float32, tokens*shape[0])
				for _, kernel := range append([]string{"none"}, qBatchKernelNames()...) {
					b.Run(fmt.Sprintf("%v/%dx%d/tokens=%d/batched=%s", enc, shape[0], shape[1], tokens, kernel), func(b *testing.B) {
						qBatchEnabled = kernel != "none"
						defer useQBatchKernel(kernel)()
						for b.Loop() {
							qa.batchValid = [2]bool{} // count building the layout, as a fresh batch does
							qMatMulRows(dst, m, qa, 0, m.Rows)
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(tokens*m.Rows), "ns/token-row")
					})
				}
			}
		}
	}
}

// TestQBatchPoolThreads runs batched products on a pool of 1–3 threads, which
// share one QActivation and so its batched layout (built by the first
// thread to need it, or by every thread a span of blocks when the pass is
// long enough to quantize in parallel; run under -race): every output
// bitwise the reference.
func TestQBatchPoolThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	for _, enc := range quantEncodings {
		gate := rawQMatrix(rng, enc, 96, 4*GroupSize, codesRandom)
		up := rawQMatrix(rng, enc, 72, 4*GroupSize, codesExtreme)
		for _, tokens := range []int{21, parallelQuantizeTokens + 18} {
			x := edgyVector(rng, tokens*gate.Cols)
			qa := new(QActivation)
			qa.Quantize(x, gate.Cols)
			want := [2][]float32{make([]float32, tokens*gate.Rows), make([]float32, tokens*up.Rows)}
			for i, m := range []*Matrix{gate, up} {
				for tok := range tokens {
					qRowsGeneric(want[i][tok*m.Rows:(tok+1)*m.Rows], m, qa, tok, 0, m.Rows)
				}
			}
			for threads := 1; threads <= 3; threads++ {
				p := NewPool(threads)
				got := [2][]float32{make([]float32, len(want[0])), make([]float32, len(want[1]))}
				p.MatMulFastMulti(got[:], []*Matrix{gate, up}, x, tokens)
				p.Close()
				for i := range got {
					assertSameFloats(t, fmt.Sprintf("%v, %d tokens, %d threads, matrix %d", enc, tokens, threads, i), got[i], want[i])
				}
			}
		}
	}
}
