package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSampleCandidatesIsSample: over random rows (with ties at the K-th
// value, −Inf, ±0 and duplicates), a sampler fed TopKCandidates of each row
// returns the same tokens as one fed the rows, seed for seed.
func TestSampleCandidatesIsSample(t *testing.T) {
	negInf := float32(math.Inf(-1))
	params := []Params{
		{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7},
		{Temperature: 1, TopK: 1, Seed: 1},
		{Temperature: 1.3, TopK: 50, Seed: 2},
		{Temperature: 0.5, TopK: 8, TopP: 0.5, Seed: 3},
		{Temperature: 0.9, TopK: 40, TopP: 0.9, MinP: 0.05, Seed: 4},
		{Temperature: 2, TopK: 299, TopP: 0.99, Seed: 5},
	}
	for pi, p := range params {
		rng := rand.New(rand.NewPCG(uint64(pi), 9))
		a, _ := New(p)
		b, _ := New(p)
		const V = 300
		row := make([]float32, V)
		for step := range 200 {
			for i := range row {
				switch r := rng.IntN(20); {
				case r == 0:
					row[i] = negInf
				case r < 5:
					row[i] = float32(rng.IntN(4)) // many ties
				case r == 5:
					row[i] = float32(math.Copysign(0, -1))
				default:
					row[i] = float32(rng.NormFloat64() * 3)
				}
			}
			if step%17 == 0 { // mostly −Inf: fewer finite values than k
				for i := range row[:V-3] {
					row[i] = negInf
				}
			}
			want, err := a.Sample(row)
			if err != nil {
				t.Fatal(err)
			}
			k := b.CandidateK(V)
			if k != p.TopK {
				t.Fatalf("CandidateK = %d, want %d", k, p.TopK)
			}
			ids, vals := TopKCandidates(row, k)
			got, err := b.SampleCandidates(ids, vals)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("params %d step %d: candidates give %d, the row %d", pi, step, got, want)
			}
		}
	}
}

func TestCandidateKNeedsTheRow(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want int
	}{
		{Params{}, 0},
		{Params{Temperature: 1}, 0},
		{Params{Temperature: 1, TopK: 10}, 10},
		{Params{Temperature: 1, TopK: 100}, 0},
		{Params{Temperature: 1, TopK: 10, RepetitionPenalty: 1.1}, 0},
		{Params{Temperature: 1, TopK: 10, PresencePenalty: 0.5}, 0},
		{Params{Temperature: 1, TopK: 10, RepetitionPenalty: 1}, 10},
	} {
		s, err := New(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CandidateK(100); got != tc.want {
			t.Errorf("%+v: CandidateK = %d, want %d", tc.p, got, tc.want)
		}
	}
}

func TestTopKCandidates(t *testing.T) {
	ids, vals := TopKCandidates([]float32{1, 5, 3, 5, 3, 0}, 3)
	if !slices.Equal(ids, []int32{1, 2, 3, 4}) || !slices.Equal(vals, []float32{5, 3, 5, 3}) {
		t.Fatalf("got %v %v", ids, vals)
	}
	s, _ := New(Params{Temperature: 1, TopK: 2})
	if _, err := s.SampleCandidates([]int32{3, 1}, []float32{1, 2}); err == nil {
		t.Fatal("out-of-order ids accepted")
	}
	if _, err := s.SampleCandidates(nil, nil); err == nil {
		t.Fatal("no candidates accepted")
	}
}
