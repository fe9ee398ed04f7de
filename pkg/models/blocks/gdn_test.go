package blocks

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// convReference is the causal conv with silu over a whole sequence x [N, C]
// starting from a zero state, written straight from the definition: tap j of
// token t reads token t−(K−1)+j, products rounded to float32 and summed in
// tap order from zero.
func convReference(weight, x []float32, N, C, K int) []float32 {
	out := make([]float32, N*C)
	for t := range N {
		for ch := range C {
			var acc float32
			for j := range K {
				if s := t - (K - 1) + j; s >= 0 {
					acc += float32(weight[ch*K+j] * x[s*C+ch])
				} else {
					acc += float32(weight[ch*K+j] * 0)
				}
			}
			out[t*C+ch] = acc
		}
	}
	kernels.SiLU(out, out)
	return out
}

// TestCausalConvMatchesReference feeds a sequence through CausalConv in
// chunks (one token at a time as decode does, and uneven pieces as prefill
// does) on 1 to 3 threads, and checks every output bitwise against the
// whole-sequence definition, for the K = 4 fast path and other widths.
func TestCausalConvMatchesReference(t *testing.T) {
	const N = 11
	for _, K := range []int{2, 3, 4, 5} {
		for _, pieces := range [][]int{ones(N), {1, 2, 3, 5}, {5, 1, 1, 4}, {N}} {
			for threads := 1; threads <= 3; threads++ {
				t.Run(fmt.Sprintf("K=%d/pieces=%v/threads=%d", K, pieces, threads), func(t *testing.T) {
					const C = 2*8 + 2*9 // one key head of 8, two value heads of 9

					rng := rand.New(rand.NewPCG(uint64(K), 1))
					weight, x := make([]float32, C*K), make([]float32, N*C)
					for i := range weight {
						weight[i] = float32(rng.NormFloat64())
					}
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					pool := kernels.NewPool(threads)
					defer pool.Close()
					state := make([]float32, (K-1)*C)
					got := make([]float32, N*C)
					at := 0
					for _, n := range pieces {
						CausalConv(pool, C, K, weight, state, x[at*C:(at+n)*C], got[at*C:(at+n)*C], n)
						at += n
					}
					want := convReference(weight, x, N, C, K)
					if i := bitwiseDiff(got, want); i >= 0 {
						t.Fatalf("token %d channel %d: got %v, want %v", i/C, i%C, got[i], want[i])
					}
					for r := range K - 1 {
						if i := bitwiseDiff(state[r*C:(r+1)*C], x[(N-(K-1)+r)*C:(N-(K-1)+r+1)*C]); i >= 0 {
							t.Fatalf("state row %d channel %d holds the wrong token", r, i)
						}
					}
				})
			}
		}
	}
}

func ones(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 1
	}
	return p
}
