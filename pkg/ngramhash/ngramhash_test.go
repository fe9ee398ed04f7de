package ngramhash

import (
	"slices"
	"testing"
)

// Splitmix64 against the reference values of Vigna's splitmix64.c seeded
// with 1234567 (its first outputs).
func TestSplitmix64KnownAnswers(t *testing.T) {
	state := uint64(1234567)
	for _, want := range []uint64{6457827717110365317, 3203168211198807973, 9817491932198370423} {
		got := Splitmix64(state)
		state += Gamma
		if got != want {
			t.Errorf("Splitmix64 = %d, want %d", got, want)
		}
	}
}

func TestPrimesFrom(t *testing.T) {
	if got := primesFrom(1000, 4); !slices.Equal(got, []int64{1009, 1013, 1019, 1021}) {
		t.Errorf("primesFrom(1000, 4) = %v", got)
	}
	if got := primesFrom(2, 3); !slices.Equal(got, []int64{2, 3, 5}) {
		t.Errorf("primesFrom(2, 3) = %v", got)
	}
}

// Layer k continues the prime sequence where layer k−1 stopped.
func TestLayersShareOnePrimeSequence(t *testing.T) {
	p := Params{Seed: 1234, Vocab: 4160, NGramSize: 3, Heads: 16, VocabBase: 1000, Divisor: 128}
	a, b := Layer(p, 0), Layer(p, 1)
	all := primesFrom(1000, 32)
	if !slices.Equal(append(slices.Clone(a.Primes), b.Primes...), all) {
		t.Fatalf("primes of layers 0 and 1 = %v %v, want %v", a.Primes, b.Primes, all)
	}
	if a.Offsets[0] != 0 || a.Offsets[1] != a.Primes[0] || a.Rows%128 != 0 || a.Rows < a.Offsets[15]+a.Primes[15] {
		t.Errorf("offsets %v rows %d", a.Offsets, a.Rows)
	}
	for _, m := range a.Multipliers {
		if m%2 != 1 {
			t.Errorf("multiplier %d is even", m)
		}
	}
}
