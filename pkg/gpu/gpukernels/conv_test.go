package gpukernels

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/kernels"
	nvblocks "github.com/nvmai/nvmai/pkg/models/blocks"
)

// gdn_conv (tokens in parallel, CONV_TB a thread; Set.MMA2) and
// gdn_conv_seq (a thread walking every token; the default) are bitwise
// blocks.CausalConv over chunks of every length around its token blocks,
// the state carried from chunk to chunk (chunks shorter than the state
// included), for the 4-tap path and the run-time one.
func TestGDNConvBitwiseCausalConv(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	pool := kernels.NewPool(1)
	defer pool.Close()
	for _, K := range []int{4, 2, 3, 8} {
		const C = 200 // a channel tail past the 128 of a block
		chunks := []int{1, 2, 16, 17, 3, 100, 1, 33}
		w := randVec(r, C*K, 1)
		state0 := randVec(r, (K-1)*C, 1)
		for _, mma2 := range mma2Variants(t) { // gdn_conv_seq, then gdn_conv
			state := slices.Clone(state0)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				setMMA2(l, mma2)
				dw, dstate := b.up(cuda.Bytes(w)), b.up(cuda.Bytes(state))
				for i, T := range chunks {
					x := randVec(r, T*C, 2)
					want := make([]float32, T*C)
					nvblocks.CausalConv(pool, C, K, w, state, x, want, T)
					out := b.poisoned(4 * T * C)
					if err := l.GDNConv(out, b.up(cuda.Bytes(x)), dstate, dw, C, K, T); err != nil {
						t.Fatal(err)
					}
					if j := bitwise(b.f32(out, T*C), want); j >= 0 {
						t.Fatalf("K %d MMA2 %v chunk %d (T %d): token %d channel %d differs", K, mma2, i, T, j/C, j%C)
					}
					if j := bitwise(b.f32(dstate, (K-1)*C), state); j >= 0 {
						t.Fatalf("K %d MMA2 %v chunk %d (T %d): state row %d channel %d differs", K, mma2, i, T, j/C, j%C)
					}
				}
			})
		}
	}
}
