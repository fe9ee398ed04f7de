package sample

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		p    Params
		want string // "" = valid
	}{
		{"zero value is greedy", Params{}, ""},
		{"fixture generation config", Params{Temperature: 0.7, TopK: 20, TopP: 0.95}, ""},
		{"top_p 1", Params{Temperature: 1, TopP: 1}, ""},
		{"negative temperature", Params{Temperature: -0.1}, "temperature"},
		{"NaN temperature", Params{Temperature: math.NaN()}, "temperature"},
		{"infinite temperature", Params{Temperature: math.Inf(1)}, "temperature"},
		{"negative top_k", Params{Temperature: 1, TopK: -1}, "top_k"},
		{"top_p above 1", Params{Temperature: 1, TopP: 1.5}, "top_p"},
		{"negative top_p", Params{Temperature: 1, TopP: -0.5}, "top_p"},
		{"NaN top_p", Params{Temperature: 1, TopP: math.NaN()}, "top_p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestGreedy(t *testing.T) {
	cases := []struct {
		name   string
		logits []float32
		want   int
		err    bool
	}{
		{"single", []float32{3}, 0, false},
		{"max in the middle", []float32{1, 5, 2}, 1, false},
		{"ties pick the lowest id", []float32{1, 5, 5, 0, 5}, 1, false},
		{"negative infinities", []float32{float32(math.Inf(-1)), -3, float32(math.Inf(-1))}, 1, false},
		{"empty", nil, 0, true},
		{"NaN", []float32{1, float32(math.NaN())}, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Greedy(tc.logits)
			if (err != nil) != tc.err || (err == nil && got != tc.want) {
				t.Fatalf("Greedy = %d, %v; want %d (error %v)", got, err, tc.want, tc.err)
			}
			s, _ := New(Params{Seed: 1}) // temperature 0: same rule
			got2, err2 := s.Sample(tc.logits)
			if got2 != got || (err2 != nil) != (err != nil) {
				t.Fatalf("Sample at temperature 0 = %d, %v; Greedy %d, %v", got2, err2, got, err)
			}
		})
	}
}

// logitsFor returns log-probabilities of the given distribution.
func logitsFor(probs ...float64) []float32 {
	out := make([]float32, len(probs))
	for i, p := range probs {
		out[i] = float32(math.Log(p))
		if p == 0 {
			out[i] = float32(math.Inf(-1))
		}
	}
	return out
}

// TestDegenerateFiltersAreGreedy: filters that leave one token make any
// sampler greedy, whatever the seed.
func TestDegenerateFiltersAreGreedy(t *testing.T) {
	logits := []float32{0.5, 2.5, -1, 2.4, 0}
	cases := []Params{
		{Temperature: 1, TopK: 1},
		{Temperature: 5, TopK: 1, TopP: 0.9},
		{Temperature: 1, TopP: 1e-9},
		{Temperature: 100, TopP: 1e-9},
	}
	for _, p := range cases {
		for seed := range uint64(50) {
			p.Seed = seed
			s, err := New(p)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := s.Sample(logits); err != nil || got != 1 {
				t.Fatalf("%+v: got %d, %v; want the argmax 1", p, got, err)
			}
		}
	}
}

// TestFiltersKeepTheRightSet checks which tokens can ever be drawn.
func TestFiltersKeepTheRightSet(t *testing.T) {
	cases := []struct {
		name   string
		p      Params
		logits []float32
		want   []int // the tokens that must appear, and only those
	}{
		{"top-k 2", Params{Temperature: 1, TopK: 2}, logitsFor(0.1, 0.4, 0.2, 0.3), []int{1, 3}},
		{"top-k keeps ties with the k-th", Params{Temperature: 1, TopK: 2}, []float32{3, 1, 2, 2, 0}, []int{0, 2, 3}},
		{"top-k above vocab", Params{Temperature: 1, TopK: 10}, logitsFor(0.5, 0.25, 0.25), []int{0, 1, 2}},
		// Ascending 0.1, 0.2, 0.3, 0.4: cumulative 0.1, 0.3 ≤ 1−0.65 removed, 0.6 kept.
		{"top-p 0.65", Params{Temperature: 1, TopP: 0.65}, logitsFor(0.1, 0.4, 0.2, 0.3), []int{1, 3}},
		// 0.1 ≤ 0.25 removed, 0.3 > 0.25 kept.
		{"top-p 0.75", Params{Temperature: 1, TopP: 0.75}, logitsFor(0.1, 0.4, 0.2, 0.3), []int{1, 2, 3}},
		{"top-k then top-p", Params{Temperature: 1, TopK: 3, TopP: 0.5}, logitsFor(0.1, 0.4, 0.2, 0.3), []int{1, 3}},
		{"-Inf never drawn", Params{Temperature: 1}, logitsFor(0.5, 0, 0.5), []int{0, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int]bool{}
			for range 4000 {
				id, err := s.Sample(tc.logits)
				if err != nil {
					t.Fatal(err)
				}
				seen[id] = true
			}
			var got []int
			for id := range seen {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("drawn %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDistributionAndReproducibility draws many tokens with a fixed seed:
// frequencies follow softmax(logits/T) restricted by the filters, and the
// same seed gives the identical sequence.
func TestDistributionAndReproducibility(t *testing.T) {
	logits := []float32{1.0, 2.0, 0.5, 3.0, -1.0, 2.5}
	p := Params{Temperature: 0.7, TopK: 4, TopP: 0.95, Seed: 42}
	// Expected: top-4 = ids 3, 5, 1, 0; then top-p on softmax(l/0.7).
	kept := []int{3, 5, 1, 0}
	w := make([]float64, len(kept))
	var sum float64
	for i, id := range kept {
		w[i] = math.Exp(float64(logits[id]) / 0.7)
		sum += w[i]
	}
	// Ascending cumulative: id 0 has p = w[3]/sum ≈ 0.031 ≤ 0.05 → removed.
	if w[3]/sum > 0.05 {
		t.Fatalf("test premise: p(id 0) = %v", w[3]/sum)
	}
	sum -= w[3]
	want := map[int]float64{3: w[0] / sum, 5: w[1] / sum, 1: w[2] / sum}

	const n = 200_000
	draw := func(seed uint64) []int {
		q := p
		q.Seed = seed
		s, err := New(q)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]int, n)
		for i := range out {
			if out[i], err = s.Sample(logits); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	a := draw(42)
	counts := map[int]int{}
	for _, id := range a {
		counts[id]++
	}
	for id, c := range counts {
		pw, ok := want[id]
		if !ok {
			t.Fatalf("drew filtered token %d (%d times)", id, c)
		}
		got := float64(c) / n
		sd := math.Sqrt(pw * (1 - pw) / n)
		if math.Abs(got-pw) > 5*sd {
			t.Errorf("token %d: frequency %.4f, want %.4f ± %.4f", id, got, pw, 5*sd)
		}
	}
	if !slices.Equal(a, draw(42)) {
		t.Error("the same seed gave a different sequence")
	}
	if slices.Equal(a, draw(43)) {
		t.Error("seeds 42 and 43 gave the same sequence")
	}
}

func TestSampleRejectsBrokenLogits(t *testing.T) {
	s, _ := New(Params{Temperature: 1, Seed: 7})
	cases := map[string][]float32{
		"empty":   nil,
		"NaN":     {1, float32(math.NaN())},
		"+Inf":    {1, float32(math.Inf(1))},
		"all-Inf": {float32(math.Inf(-1)), float32(math.Inf(-1))},
	}
	for name, logits := range cases {
		if _, err := s.Sample(logits); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func BenchmarkSampleFullVocab(b *testing.B) {
	logits := make([]float32, 248320)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37)) * 8
	}
	s, _ := New(Params{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 1})
	for b.Loop() {
		if _, err := s.Sample(logits); err != nil {
			b.Fatal(err)
		}
	}
}

// Top-p without top-k over a 248k row: a flat row (the nucleus is most of
// it, so every candidate is sorted) and a peaked one, as a trained model's
// rows are (logits falling with the log of the rank: the nucleus is a few
// dozen tokens, found among the 64 most probable).
func BenchmarkSampleTopPOnly(b *testing.B) {
	const V = 248320
	flat, peaked := make([]float32, V), make([]float32, V)
	for i := range flat {
		flat[i] = float32(math.Sin(float64(i)*0.37)) * 8
		rank := (i*7919 + 13) % V // a permutation of the ids
		peaked[i] = float32(-2.5 * math.Log(float64(rank+1)))
	}
	for _, bc := range []struct {
		name string
		row  []float32
	}{{"flat", flat}, {"peaked", peaked}} {
		b.Run(bc.name, func(b *testing.B) {
			s, _ := New(Params{Temperature: 0.7, TopP: 0.95, Seed: 1})
			for b.Loop() {
				if _, err := s.Sample(bc.row); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
