package tokenmask

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// child is the node below n over byte c, or -1.
func child(t *Trie, n int32, c byte) int32 {
	for e := t.EdgeLo[n]; e < t.EdgeLo[n+1]; e++ {
		if t.EdgeByte[e] == c {
			return t.EdgeNode[e]
		}
	}
	return -1
}

func TestTrieOwnBelowSubtree(t *testing.T) {
	tr := NewTrie([]Token{{[]byte("abc"), 4}, {[]byte("b"), 1}, {[]byte("a"), 3}, {[]byte("ab"), 2}, {[]byte("a"), 0}})
	a := child(&tr, 0, 'a')
	ab := child(&tr, a, 'b')
	b := child(&tr, 0, 'b')
	for _, tc := range []struct {
		name                string
		n                   int32
		own, below, subtree []int32
	}{
		{"root", 0, nil, []int32{0, 3, 2, 4, 1}, []int32{0, 3, 2, 4, 1}},
		{"a", a, []int32{0, 3}, []int32{2, 4}, []int32{0, 3, 2, 4}},
		{"ab", ab, []int32{2}, []int32{4}, []int32{2, 4}},
		{"b", b, []int32{1}, nil, []int32{1}},
	} {
		if got := tr.Own(tc.n); !slices.Equal(got, tc.own) {
			t.Errorf("%s: Own %v, want %v", tc.name, got, tc.own)
		}
		if got := tr.Below(tc.n); !slices.Equal(got, tc.below) {
			t.Errorf("%s: Below %v, want %v", tc.name, got, tc.below)
		}
		if got := tr.Subtree(tc.n); !slices.Equal(got, tc.subtree) {
			t.Errorf("%s: Subtree %v, want %v", tc.name, got, tc.subtree)
		}
	}
}

// Apply masks exactly the ids not in the bitset, over rows denser and
// sparser than half, and rows longer than the bitset (padding).
func TestApplyMatchesBitset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Scratch
	for _, density := range []float64{0, 0.01, 0.3, 0.6, 0.99, 1} {
		for _, n := range []int{1, 63, 64, 65, 3000} {
			allowed := make([]uint64, (n+63)/64)
			for i := range n {
				if rng.Float64() < density {
					allowed[i/64] |= 1 << (i % 64)
				}
			}
			row := make([]float32, n+70)
			for i := range row {
				row[i] = float32(i)
			}
			s.Apply(allowed, row)
			for i, x := range row {
				want := float32(i)
				if i >= n || allowed[i/64]&(1<<(i%64)) == 0 {
					want = float32(math.Inf(-1))
				}
				if x != want {
					t.Fatalf("density %v, n %d: logit %d = %v, want %v", density, n, i, x, want)
				}
			}
		}
	}
}
