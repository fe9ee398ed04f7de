package gpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/sample"
)

// TestTopKCandidatesExact: topk_cand lists exactly sample.TopKCandidates
// (ids in order, logits bit for bit), at vocabulary size and at odd sizes,
// with ties at the k-th value, ±0, −Inf, a row that is nearly all −Inf, and
// flags NaN and +Inf; past cap it still counts every candidate.
func TestTopKCandidatesExact(t *testing.T) {
	negInf := float32(math.Inf(-1))
	type tc struct {
		name string
		row  []float32
		k    int
	}
	r := rand.New(rand.NewPCG(41, 42))
	var cases []tc
	for _, V := range []int{248320, 151936, 1000, 33, 2} {
		v := randVec(r, V, 3)
		cases = append(cases, tc{fmt.Sprintf("V%d k1", V), v, 1})
		if V > 20 {
			cases = append(cases, tc{fmt.Sprintf("V%d k20", V), v, 20})
		}
		ties := slices.Clone(v)
		for i := range ties {
			if r.IntN(3) == 0 {
				ties[i] = float32(r.IntN(5)) - 2 // many exact ties, ±0 among them
			}
			if r.IntN(50) == 0 {
				ties[i] = float32(math.Copysign(0, -1))
			}
			if r.IntN(10) == 0 {
				ties[i] = negInf
			}
		}
		cases = append(cases, tc{fmt.Sprintf("V%d ties k%d", V, min(V-1, 40)), ties, min(V-1, 40)})
		cases = append(cases, tc{fmt.Sprintf("V%d k=V-1", V), ties, V - 1})
	}
	sparse := make([]float32, 5000)
	for i := range sparse {
		sparse[i] = negInf
	}
	sparse[17], sparse[4000], sparse[4999] = 1, -3, 1
	cases = append(cases, tc{"mostly -Inf, k past the finite", sparse, 10}, tc{"mostly -Inf", sparse, 2})
	const cap = 1024
	withGPU(t, func(b *gpuBuf, l *Launcher) {
		out := b.poisoned(4 * (4 + 2*cap))
		run := func(row []float32, k int) []int32 {
			if err := l.TopKCand(out, b.up(cuda.Bytes(row)), len(row), k, cap); err != nil {
				t.Fatal(err)
			}
			got := make([]int32, 4+2*cap)
			if err := b.c.DtoH(cuda.Bytes(got), out); err != nil {
				t.Fatal(err)
			}
			return got
		}
		for _, c := range cases {
			wantIDs, wantVals := sample.TopKCandidates(c.row, c.k)
			got := run(c.row, c.k)
			if int(got[0]) != len(wantIDs) || got[1] != 0 {
				t.Fatalf("%s: count %d flag %d, want %d candidates", c.name, got[0], got[1], len(wantIDs))
			}
			for i := range min(len(wantIDs), cap) {
				id, val := got[4+2*i], math.Float32frombits(uint32(got[5+2*i]))
				if id != wantIDs[i] || math.Float32bits(val) != math.Float32bits(wantVals[i]) {
					t.Fatalf("%s: candidate %d = (%d, %v), want (%d, %v)", c.name, i, id, val, wantIDs[i], wantVals[i])
				}
			}
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			row := randVec(r, 4096, 1)
			row[777] = bad
			if got := run(row, 5); got[1] != 1 {
				t.Fatalf("a %v in the row is not flagged", bad)
			}
		}
	})
}
