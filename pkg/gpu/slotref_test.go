package gpu

import (
	"slices"
	"testing"
)

// The reference LRU, step by step on a small layer: misses take
// never-used slots first (lowest first), a step's hits are never evicted
// by its own misses even when they come later in router order, and ties
// between slots last used by one step go to the lowest index.
func TestSlotRefResolve(t *testing.T) {
	r := newSlotRef(6, 3)
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
		got := r.resolve(tc.sel)
		if !slices.Equal(got, tc.slots) {
			t.Fatalf("step %d: slots %v, want %v", i+1, got, tc.slots)
		}
		if !slices.Equal(r.fill, tc.fill) {
			t.Fatalf("step %d: fill %v, want %v", i+1, r.fill, tc.fill)
		}
		for s, e := range r.expertOf { // the tables agree with each other
			if e >= 0 && r.slotOf[e] != int32(s) {
				t.Fatalf("step %d: slot %d holds %d, slotOf says %d", i+1, s, e, r.slotOf[e])
			}
		}
	}
	if r.hits != 4 || r.misses != 6 {
		t.Fatalf("%d hits, %d misses; want 4, 6", r.hits, r.misses)
	}
	w := r.words(2)
	if len(w) != 6+2*3+2+2*2 || w[6+2*3] != 5 || w[6+2*3+1] != 0 {
		t.Fatalf("words %v", w)
	}
}
