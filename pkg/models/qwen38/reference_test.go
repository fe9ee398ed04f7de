package qwen38

import (
	"slices"
	"strings"
	"testing"
)

// TestNgramHasherIsPLERows: the exported hasher gives the row ids the
// model's own pleRows gives, over chunks split anywhere and across EOS
// resets; a clone carries the history on independently and Reset makes
// it fresh.
func TestNgramHasherIsPLERows(t *testing.T) {
	c := Config{VocabSize: 4160, NgramSize: 3, HeadsPerNgram: 8, Seed: 1234, NgramRowsDivide: 128, NgramVocabBase: 1000, EOS: 4096}
	m := &Model{cfg: c}
	p := &pleWeights{consts: newNgramConsts(c, 0)}
	ids := []int{5, 9, 4096, 17, 4096, 4096, 3, 8, 8, 2000, 4159, 0}
	ps := &pleState{hist: newNgramHistory(c)}
	want := m.pleRows(p, ps, ids, nil)
	for _, split := range []int{1, 2, 3, 5, len(ids)} {
		h := NewNgramHasher(c, 0)
		var got []int64
		for i := 0; i < len(ids); i += split {
			got = h.Rows(got, ids[i:min(i+split, len(ids))])
		}
		if !slices.Equal(got, want) {
			t.Fatalf("chunks of %d: rows %v, want %v", split, got, want)
		}
	}
	h := NewNgramHasher(c, 0)
	h.Rows(nil, ids[:4])
	cl := h.Clone()
	if a, b := h.Rows(nil, ids[4:]), cl.Rows(nil, ids[4:]); !slices.Equal(a, b) || !slices.Equal(a, want[4*c.NgramHeads():]) {
		t.Fatalf("a clone's rows differ from the original's")
	}
	h.Reset()
	if got := h.Rows(nil, ids); !slices.Equal(got, want) {
		t.Fatalf("after Reset rows %v, want %v", got, want)
	}
}

// TestNgramHasherCheckConstants: the recomputed constants pass, a changed
// one is refused naming where it came from.
func TestNgramHasherCheckConstants(t *testing.T) {
	c := Config{VocabSize: 4160, NgramSize: 3, HeadsPerNgram: 8, Seed: 1234, NgramRowsDivide: 128, NgramVocabBase: 1000, EOS: 4096}
	h := NewNgramHasher(c, 0)
	nc := newNgramConsts(c, 0)
	if err := h.CheckConstants("ngram[0]", nc.mult, nc.primes, nc.offsets); err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(nc.primes)
	bad[3]++
	err := h.CheckConstants("ngram[0]", nc.mult, bad, nc.offsets)
	if err == nil || !strings.Contains(err.Error(), "ngram[0].vocab_sizes[3]") {
		t.Fatalf("a changed prime gave %v", err)
	}
}
