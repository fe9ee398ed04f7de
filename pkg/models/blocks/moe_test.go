package blocks

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
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
				sigma := Sigmoid32(gates[tok])
				for i := range H {
					var acc float32
					for s := range k {
						acc += float32(weight[tok*k+s] * routed[(tok*k+s)*H+i])
					}
					want[tok*H+i] = acc + float32(sigma*out[tok*H+i])
				}
			}
			// routed's rows in reverse: combineExperts must read each (token,
			// slot)'s row where rowOf says.
			rowOf, rows := make([]int32, T*k), make([]float32, T*k*H)
			for r := range T * k {
				rowOf[r] = int32(T*k - 1 - r)
				copy(rows[int(rowOf[r])*H:], routed[r*H:(r+1)*H])
			}
			m := &MoE{TopK: k, Hidden: H}
			m.combineExperts(new(MoEScratch), gates, weight, rows, rowOf, out, T)
			if i := bitwiseDiff(out, want); i >= 0 {
				t.Fatalf("token %d column %d: got %v, want %v", i/H, i%H, out[i], want[i])
			}
		})
	}
}

func TestTopIndices(t *testing.T) {
	for _, tc := range []struct {
		scores []float32
		n      int
		want   []int
	}{
		{[]float32{1, 5, 3, 4}, 2, []int{1, 3}},
		{[]float32{1, 5, 3, 4}, 4, []int{1, 3, 2, 0}},
		{[]float32{2, 2, 2}, 2, []int{0, 1}},
		{[]float32{-1, -3, 7, 7, 0}, 3, []int{2, 3, 4}},
		{[]float32{9}, 1, []int{0}},
		{[]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 3, []int{9, 8, 7}},
	} {
		if got := TopIndices(tc.scores, tc.n, nil); !slices.Equal(got, tc.want) {
			t.Errorf("TopIndices(%v, %d) = %v, want %v", tc.scores, tc.n, got, tc.want)
		}
	}
}

// bitwiseDiff returns the first index where a and b differ bitwise, or −1.
var bitwiseDiff = testfix.BitwiseDiff
