package sample

import (
	"math"
	"strings"
	"testing"
)

// The penalties are checked against values worked out by hand from their
// definitions (OpenAI's presence/frequency, transformers' CTRL repetition).
func TestPenaltiesOverHistory(t *testing.T) {
	cases := []struct {
		name    string
		p       Params
		history []int
		logits  []float32
		want    []float32
	}{
		{"presence once per seen token", Params{PresencePenalty: 0.5}, []int{1, 1, 2},
			[]float32{1, 1, 1}, []float32{1, 0.5, 0.5}},
		{"frequency scales with count", Params{FrequencyPenalty: 0.25}, []int{1, 1, 2},
			[]float32{1, 1, 1}, []float32{1, 0.5, 0.75}},
		{"repetition divides positive, multiplies negative", Params{RepetitionPenalty: 2}, []int{0, 1},
			[]float32{4, -4, 3}, []float32{2, -8, 3}},
		{"all three", Params{RepetitionPenalty: 2, PresencePenalty: 1, FrequencyPenalty: 1}, []int{0, 0},
			[]float32{4, 0, 0}, []float32{-1, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			s.counts = map[int]int{}
			for _, id := range tc.history {
				s.counts[id]++
			}
			got := s.applyPenalties(tc.p, tc.logits)
			for i := range got {
				if math.Abs(float64(got[i]-tc.want[i])) > 1e-6 {
					t.Fatalf("logits %v, want %v", got, tc.want)
				}
			}
			if tc.logits[0] == got[0] && tc.want[0] != tc.logits[0] {
				t.Fatal("the caller's logits were modified")
			}
		})
	}
}

// A greedy sampler with a strong presence penalty never repeats a token
// while others remain: the history is the sampler's own output.
func TestPresencePenaltyAvoidsRepeatsInGreedyDecoding(t *testing.T) {
	s, err := New(Params{PresencePenalty: 2})
	if err != nil {
		t.Fatal(err)
	}
	logits := []float32{3, 2.5, 2, 1.5}
	seen := map[int]bool{}
	for range 4 {
		id, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("token %d repeated", id)
		}
		seen[id] = true
	}
	if logits[0] != 3 {
		t.Fatal("Sample changed the caller's logits")
	}
}

// Without penalties the sampler takes the unpenalized path: the same seed
// gives the same draws as before penalties existed (1 counts as off).
func TestNoPenaltyIsBitwiseUnchanged(t *testing.T) {
	logits := []float32{0.1, 0.4, 0.2, 0.9, 0.3, 0.05}
	a, _ := New(Params{Temperature: 1, Seed: 7})
	b, _ := New(Params{Temperature: 1, Seed: 7, RepetitionPenalty: 1})
	for range 200 {
		x, _ := a.Sample(logits)
		y, _ := b.Sample(logits)
		if x != y {
			t.Fatal("RepetitionPenalty 1 changed the draws")
		}
	}
	if b.counts != nil {
		t.Fatal("history recorded with no penalty on")
	}
}

func TestMinPKeepsTokensNearTheBest(t *testing.T) {
	// probabilities ∝ e^l: e^0 / e^2 ≈ 0.135 < 0.2 ≤ e^-1 ≈ 0.37
	s, _ := New(Params{Temperature: 1, MinP: 0.2, Seed: 1})
	logits := []float32{2, 1, 0, -5}
	for range 500 {
		id, _ := s.Sample(logits)
		if id > 1 {
			t.Fatalf("token %d sampled, below min_p", id)
		}
	}
}

func TestValidatePenalties(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{MinP: 1.5}, "min_p"},
		{Params{PresencePenalty: 3}, "presence_penalty"},
		{Params{FrequencyPenalty: math.NaN()}, "frequency_penalty"},
		{Params{RepetitionPenalty: -1}, "repetition_penalty"},
	} {
		if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.p, err, tc.want)
		}
	}
}
