package qwen38

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// TestGreedyMatchesTransformers decodes every reference prompt's 48 greedy
// tokens one at a time, in both layouts, and compares them with
// transformers' (no stop at EOS, as the refs were generated).
func TestGreedyMatchesTransformers(t *testing.T) {
	for _, layout := range layouts {
		m := open(t, layout, nil)
		V := m.Config().VocabSize
		for i, r := range loadRefs(t) {
			if quickTests() && len(r.IDs) > 120 {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", layout, i), func(t *testing.T) {
				st := m.NewState(StateOptions{})
				logits := make([]float32, V)
				if err := m.Forward(st, r.IDs, logits, false); err != nil {
					t.Fatal(err)
				}
				for j, want := range r.Greedy {
					got := argmax(logits)
					if got != want {
						t.Fatalf("greedy token %d: %d, transformers %d", j, got, want)
					}
					if err := m.Forward(st, []int{got}, logits, false); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

// run feeds ids to a fresh state in pieces of the given lengths (the rest
// in one piece) and returns every position's logits and the state.
func run(t *testing.T, m *Model, ids []int, pieces []int) ([]float32, *State) {
	t.Helper()
	return prefillAt(t, m, StateOptions{}, ids, pieces)
}

func ones(n int) []int { return slices.Repeat([]int{1}, n) }

// TestChunkingIsBitwiseInvisible: any split of a prompt — one token at a
// time, splits right before, at and after the EOS that resets the n-gram
// context, splits inside the PLE conv's dilated window and across the
// indexer's dense window — gives bitwise the logits of one full prefill,
// and the states continue identically.
func TestChunkingIsBitwiseInvisible(t *testing.T) {
	m := open(t, layouts[0], nil)
	refs := loadRefs(t)
	V := m.Config().VocabSize
	cases := []struct {
		prompt int
		pieces [][]int
	}{
		{3, [][]int{ones(20), {11}, {12}, {10, 1, 1}, {2, 3, 5, 7}, {9, 4}}}, // EOS at 11
		{5, [][]int{ones(42), {1, 10, 31}, {11, 1}, {4, 4, 4}}},
		{6, [][]int{append(ones(30), 3, 17), {300}, {11, 1, 500}, {255, 1, 2}}},
	}
	for _, tc := range cases {
		ids := quickIDs(refs[tc.prompt].IDs)
		want, wantSt := run(t, m, ids, nil)
		for _, pieces := range tc.pieces {
			t.Run(fmt.Sprintf("prompt%d/%v", tc.prompt, pieces[:min(len(pieces), 6)]), func(t *testing.T) {
				got, st := run(t, m, ids, pieces)
				if i := bitwiseDiff(got, want); i >= 0 {
					t.Fatalf("position %d logit %d: %v, full prefill %v", i/V, i%V, got[i], want[i])
				}
				a, b := make([]float32, V), make([]float32, V)
				ref := wantSt.Clone()
				for _, id := range []int{4096, 17, 4096, 4096, 300} {
					if err := m.Forward(st, []int{id}, a, false); err != nil {
						t.Fatal(err)
					}
					if err := m.Forward(ref, []int{id}, b, false); err != nil {
						t.Fatal(err)
					}
					if i := bitwiseDiff(a, b); i >= 0 {
						t.Fatalf("after the prompt, token %d: logit %d differs", id, i)
					}
				}
			})
		}
	}
}

// TestThreadCountIsBitwiseInvisible: the logits of the long and the EOS
// prompt, and of decode steps after them, do not depend on the pool.
func TestThreadCountIsBitwiseInvisible(t *testing.T) {
	refs := loadRefs(t)
	var want [][]float32
	for _, threads := range []int{1, 2, 3, 4} {
		pool := kernels.NewPool(threads)
		m := open(t, layouts[1], pool)
		var got [][]float32
		for _, p := range []int{3, 6} {
			l, st := run(t, m, quickIDs(refs[p].IDs), []int{5})
			one := make([]float32, m.Config().VocabSize)
			for range 4 {
				if err := m.Forward(st, []int{argmax(one)}, one, false); err != nil {
					t.Fatal(err)
				}
				l = append(l, one...)
			}
			got = append(got, l)
		}
		pool.Close()
		if want == nil {
			want = got
			continue
		}
		for i := range got {
			if j := bitwiseDiff(got[i], want[i]); j >= 0 {
				t.Fatalf("%d threads: logit %d of case %d differs from 1 thread", threads, j, i)
			}
		}
	}
}

// TestResetMatchesFreshState: a state reused after Reset computes what a
// new one does.
func TestResetMatchesFreshState(t *testing.T) {
	m := open(t, layouts[0], nil)
	refs := loadRefs(t)
	want, _ := run(t, m, refs[3].IDs, nil)
	_, st := run(t, m, refs[5].IDs, nil)
	st.Reset()
	V := m.Config().VocabSize
	got := make([]float32, len(refs[3].IDs)*V)
	if err := m.Forward(st, refs[3].IDs, got, true); err != nil {
		t.Fatal(err)
	}
	if i := bitwiseDiff(got, want); i >= 0 {
		t.Fatalf("logit %d differs after Reset", i)
	}
}
