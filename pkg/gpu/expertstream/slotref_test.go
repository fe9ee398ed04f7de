package expertstream

import (
	"math"
	"slices"
	"testing"
)

// The reference LRU, step by step on a small layer: misses take
// never-used slots first (lowest first), a step's hits are never evicted
// by its own misses even when they come later in router order, and ties
// between slots last used by one step go to the lowest index.
func TestSlotRefResolve(t *testing.T) {
	r := NewSlotRef(6, 3)
	for i, tc := range []struct {
		sel, slots []int32
		fill       [][2]int32
	}{
		{sel: []int32{4, 1}, slots: []int32{0, 1}, fill: [][2]int32{{0, 4}, {1, 1}}},
		{sel: []int32{1, 5}, slots: []int32{1, 2}, fill: [][2]int32{{2, 5}}},
		// 4 (slot 0, the least recent) is a hit later in router order:
		// expert 2 takes slot 1 (tied with 2 at step 2, the lower index).
		{sel: []int32{2, 4}, slots: []int32{1, 0}, fill: [][2]int32{{1, 2}}},
		{sel: []int32{1, 3}, slots: []int32{2, 0}, fill: [][2]int32{{2, 1}, {0, 3}}},
		{sel: []int32{3, 1}, slots: []int32{0, 2}, fill: nil},
	} {
		got := r.Resolve(tc.sel)
		if !slices.Equal(got, tc.slots) {
			t.Fatalf("step %d: slots %v, want %v", i+1, got, tc.slots)
		}
		if !slices.Equal(r.Fill, tc.fill) {
			t.Fatalf("step %d: fill %v, want %v", i+1, r.Fill, tc.fill)
		}
		for s, e := range r.ExpertOf { // the tables agree with each other
			if e >= 0 && r.SlotOf[e] != int32(s) {
				t.Fatalf("step %d: slot %d holds %d, slotOf says %d", i+1, s, e, r.SlotOf[e])
			}
		}
	}
	if r.Hits != 4 || r.Misses != 6 {
		t.Fatalf("%d hits, %d misses; want 4, 6", r.Hits, r.Misses)
	}
	w := r.Words(2)
	if len(w) != 6+2*3+3+4*2 || w[6+2*3] != 5 || w[6+2*3+1] != 0 || w[6+2*3+2+2*2] != 0 {
		t.Fatalf("words %v", w)
	}
}

// The read-ahead in the reference, step by step on a small layer: the
// guesses are the top-k logits (NaN last, the lower id on ties) in id
// order; a guess in VRAM is only stamped, the others take the least
// recently used slots no guess of this read-ahead holds; the step then
// finds the right guesses as hits (counted as guessed, and as copies used
// when copied ahead), and its misses evict a wrong guess only after every
// slot used before it.
func TestSlotRefPrefetch(t *testing.T) {
	nan := float32(math.NaN())
	if got := guessTopK([]float32{1, nan, 3, 3, 0, 2}, 3); !slices.Equal(got, []int32{2, 3, 5}) {
		t.Fatalf("guessTopK: %v, want [2 3 5]", got)
	}
	if got := guessTopK([]float32{nan, nan, nan}, 2); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("guessTopK of NaNs: %v, want [0 1]", got)
	}
	r := NewSlotRef(6, 4)
	r.Resolve([]int32{0, 1}) // step 1: slots 0, 1 stamped 2
	r.Resolve([]int32{2, 1}) // step 2: slot 2 takes 2; 1 hit: stamps 4
	// Read-ahead for step 3: guesses 1 (in slot 1) and 4 (copied into
	// slot 3, never used); both stamped 5.
	logits := []float32{0, 9, 0, 0, 8, 0}
	if g := r.Prefetch(logits, 2); !slices.Equal(g, []int32{1, 4}) {
		t.Fatalf("guesses %v, want [1 4]", g)
	}
	if !slices.Equal(r.Ahead, [][2]int32{{3, 4}}) || r.LastUse[1] != 5 || r.LastUse[3] != 5 {
		t.Fatalf("read-ahead list %v, stamps %v", r.Ahead, r.LastUse)
	}
	// Step 3 picks 4 (guessed, copied ahead) and 5 (a miss: it takes slot 0,
	// stamped 2, not a guess's slot).
	if got := r.Resolve([]int32{4, 5}); !slices.Equal(got, []int32{3, 0}) {
		t.Fatalf("step 3 slots %v, want [3 0]", got)
	}
	if r.Guessed != 1 || r.AheadUsed != 1 || r.Guesses != 2 || r.AheadCopies != 1 {
		t.Fatalf("counters guessed %d used %d guesses %d copies %d; want 1 1 2 1", r.Guessed, r.AheadUsed, r.Guesses, r.AheadCopies)
	}
	// Read-ahead for step 4 guesses 0 and 3 (both copied: into slot 2,
	// stamp 4, then slot 1, stamp 5). Step 4 picks 3 (guessed) and 2,
	// which the guess evicted: a miss into slot 0 (stamp 6), older than the
	// wrong guess 0 in slot 2 (stamp 7), which stays.
	r.Prefetch([]float32{9, 0, 0, 9, 0, 0}, 2)
	if !slices.Equal(r.Ahead, [][2]int32{{2, 0}, {1, 3}}) {
		t.Fatalf("read-ahead list %v, want [[2 0] [1 3]]", r.Ahead)
	}
	if got := r.Resolve([]int32{2, 3}); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("step 4 slots %v, want [0 1]", got)
	}
	if r.Guessed != 2 || r.AheadUsed != 2 || r.Hits != 3 || r.ExpertOf[2] != 0 {
		t.Fatalf("guessed %d used %d hits %d, slot 2 holds %d; want 2 2 3, 0", r.Guessed, r.AheadUsed, r.Hits, r.ExpertOf[2])
	}
	for s, e := range r.ExpertOf {
		if e >= 0 && r.SlotOf[e] != int32(s) {
			t.Fatalf("slot %d holds %d, slotOf says %d", s, e, r.SlotOf[e])
		}
	}
}
