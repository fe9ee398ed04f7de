package gpu

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
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
	r := newSlotRef(6, 4)
	r.resolve([]int32{0, 1}) // step 1: slots 0, 1 stamped 2
	r.resolve([]int32{2, 1}) // step 2: slot 2 takes 2; 1 hit: stamps 4
	// Read-ahead for step 3: guesses 1 (in slot 1) and 4 (copied into
	// slot 3, never used); both stamped 5.
	logits := []float32{0, 9, 0, 0, 8, 0}
	if g := r.prefetch(logits, 2); !slices.Equal(g, []int32{1, 4}) {
		t.Fatalf("guesses %v, want [1 4]", g)
	}
	if !slices.Equal(r.ahead, [][2]int32{{3, 4}}) || r.lastUse[1] != 5 || r.lastUse[3] != 5 {
		t.Fatalf("read-ahead list %v, stamps %v", r.ahead, r.lastUse)
	}
	// Step 3 picks 4 (guessed, copied ahead) and 5 (a miss: it takes slot 0,
	// stamped 2, not a guess's slot).
	if got := r.resolve([]int32{4, 5}); !slices.Equal(got, []int32{3, 0}) {
		t.Fatalf("step 3 slots %v, want [3 0]", got)
	}
	if r.guessed != 1 || r.aheadUsed != 1 || r.guesses != 2 || r.aheadCopies != 1 {
		t.Fatalf("counters guessed %d used %d guesses %d copies %d; want 1 1 2 1", r.guessed, r.aheadUsed, r.guesses, r.aheadCopies)
	}
	// Read-ahead for step 4 guesses 0 and 3 (both copied: into slot 2,
	// stamp 4, then slot 1, stamp 5). Step 4 picks 3 (guessed) and 2,
	// which the guess evicted: a miss into slot 0 (stamp 6), older than the
	// wrong guess 0 in slot 2 (stamp 7), which stays.
	r.prefetch([]float32{9, 0, 0, 9, 0, 0}, 2)
	if !slices.Equal(r.ahead, [][2]int32{{2, 0}, {1, 3}}) {
		t.Fatalf("read-ahead list %v, want [[2 0] [1 3]]", r.ahead)
	}
	if got := r.resolve([]int32{2, 3}); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("step 4 slots %v, want [0 1]", got)
	}
	if r.guessed != 2 || r.aheadUsed != 2 || r.hits != 3 || r.expertOf[2] != 0 {
		t.Fatalf("guessed %d used %d hits %d, slot 2 holds %d; want 2 2 3, 0", r.guessed, r.aheadUsed, r.hits, r.expertOf[2])
	}
	for s, e := range r.expertOf {
		if e >= 0 && r.slotOf[e] != int32(s) {
			t.Fatalf("slot %d holds %d, slotOf says %d", s, e, r.slotOf[e])
		}
	}
}

// NVMAI_GPU_READAHEAD and NVMAI_GPU_READAHEAD_BLOCKS: on with the default
// grid unless told otherwise; anything else is refused naming the variable.
func TestReadAheadFromEnv(t *testing.T) {
	for _, tc := range []struct {
		on, blocks string
		wantOn     bool
		wantBlocks int
		bad        string
	}{
		{"", "", true, gpukernels.DefaultAheadBlocks, ""},
		{"1", "8", true, 8, ""},
		{"0", "", false, gpukernels.DefaultAheadBlocks, ""},
		{"off", "", false, 0, "NVMAI_GPU_READAHEAD="},
		{"", "0", false, 0, "NVMAI_GPU_READAHEAD_BLOCKS="},
		{"", "many", false, 0, "NVMAI_GPU_READAHEAD_BLOCKS="},
	} {
		t.Setenv("NVMAI_GPU_READAHEAD", tc.on)
		t.Setenv("NVMAI_GPU_READAHEAD_BLOCKS", tc.blocks)
		on, blocks, err := readAheadFromEnv()
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%q/%q: error %v, want one naming %s", tc.on, tc.blocks, err, tc.bad)
			}
			continue
		}
		if err != nil || on != tc.wantOn || blocks != tc.wantBlocks {
			t.Errorf("%q/%q: %v %d %v, want %v %d", tc.on, tc.blocks, on, blocks, err, tc.wantOn, tc.wantBlocks)
		}
	}
}
