package qwen35

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCombineExperts checks the vectorised combination against the sum as
// the architecture writes it: per token and column, the routed outputs
// weighted and summed in slot order from zero, each product rounded, then
// the shared expert output times σ(gate) added.
func TestCombineExperts(t *testing.T) {
	for _, H := range []int{1, 15, 16, 17, 64, 2048} {
		t.Run(fmt.Sprint(H), func(t *testing.T) {
			const T, k = 3, 8
			rng := rand.New(rand.NewPCG(uint64(H), 2))
			normal := func(n int) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
				return v
			}
			gates, weight, routed, out := normal(T), normal(T*k), normal(T*k*H), normal(T*H)
			want := make([]float32, T*H)
			for tok := range T {
				sigma := sigmoid32(gates[tok])
				for i := range H {
					var acc float32
					for s := range k {
						acc += float32(weight[tok*k+s] * routed[(tok*k+s)*H+i])
					}
					want[tok*H+i] = acc + float32(sigma*out[tok*H+i])
				}
			}
			m := &Model{cfg: Config{ExpertsPerToken: k, HiddenSize: H}}
			m.combineExperts(new(ffnScratch), gates, weight, routed, out, T)
			if i := bitwiseDiff(out, want); i >= 0 {
				t.Fatalf("token %d column %d: got %v, want %v", i/H, i%H, out[i], want[i])
			}
		})
	}
}
