package routing

import (
	"slices"
	"strings"
	"testing"
)

// TraceOf takes the source's rows at the positions given, in their order
// (repeats and gaps included), so SimulateLRUFrom on it is the simulation
// of exactly those positions; a synthetic source's rows are its own; a
// short trace that may not wrap, and a source breaking the geometry, are
// errors naming the position.
func TestTraceOf(t *testing.T) {
	g := Geometry{Layers: 2, Experts: 8, TopK: 2}
	tr := mustParse(t, "0 0 0 1\n0 1 2 3\n1 0 4 5\n1 1 6 7\n2 0 1 2\n2 1 3 4\n", g)
	src := NewTraceSource(tr, "test", false)
	positions := []int{2, 0, 2, 1}
	got, err := TraceOf(src, g, positions)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tokens() != len(positions) || got.First != 0 {
		t.Fatalf("%d tokens from %d, want %d from 0", got.Tokens(), got.First, len(positions))
	}
	for i, p := range positions {
		for l := range g.Layers {
			if !slices.Equal(got.Row(i, l), tr.Row(p, l)) {
				t.Errorf("token %d layer %d: %v, want position %d's %v", i, l, got.Row(i, l), p, tr.Row(p, l))
			}
		}
	}
	// Layer 0 sees {1 2} {0 1} {1 2} {4 5}, layer 1 {3 4} {2 3} {3 4} {6 7}:
	// an LRU of 4 counted from token 2 hits all of token 2 and none of
	// token 3 in both.
	if s := SimulateLRUFrom(got, 4, 2); s.Accesses != 8 || s.Hits != 4 {
		t.Errorf("LRU from token 2: %+v, want 4 hits of 8", s)
	}

	if _, err := TraceOf(src, g, []int{3}); err == nil || !strings.Contains(err.Error(), "position 3") {
		t.Errorf("past a trace that may not wrap: %v", err)
	}
	syn, err := NewSynthetic(Geometry{Layers: 3, Experts: 64, TopK: 4}, Spec{Regime: "agent", Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	sg := Geometry{Layers: 3, Experts: 64, TopK: 4}
	st, err := TraceOf(syn, sg, []int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil {
		t.Fatal(err)
	}
	for p := range 8 {
		for l := range 3 {
			want, _ := syn.Experts(p, l, nil)
			if !slices.Equal(toInts(st.Row(p, l)), want) {
				t.Errorf("synthetic position %d layer %d: %v, want %v", p, l, st.Row(p, l), want)
			}
		}
	}
	if _, err := TraceOf(src, Geometry{Layers: 2, Experts: 8, TopK: 3}, []int{0}); err == nil || !strings.Contains(err.Error(), "position 0 layer 0") {
		t.Errorf("a source of top-2 rows read as top-3: %v", err)
	}
}

func toInts(r []int32) []int {
	out := make([]int, len(r))
	for i, e := range r {
		out[i] = int(e)
	}
	return out
}
