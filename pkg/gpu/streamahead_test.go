package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
)

// aheadTargets at distances 0 … 3 over 1 … 10 layers: every layer's
// read-ahead is issued exactly once, from the hidden state entering layer
// max(j−d, 0); at most d+1 are in flight at any layer's start (issued,
// their layer not run yet), so the scratch ring of d+1 never hands a
// target the scratch of one still in flight; and distance 0 is the old
// read-ahead, each layer its own.
func TestAheadTargets(t *testing.T) {
	for d := range 4 {
		for n := 1; n <= 10; n++ {
			t.Run(fmt.Sprintf("d=%d/n=%d", d, n), func(t *testing.T) {
				issuedAt := make([]int, n)
				for j := range issuedAt {
					issuedAt[j] = -1
				}
				inFlight := map[int]bool{} // target → issued, its layer not reached
				for i := range n {
					lo, hi := aheadTargets(i, d, n)
					if lo > hi || lo < 0 || hi > n {
						t.Fatalf("layer %d: targets [%d, %d) outside the %d layers", i, lo, hi, n)
					}
					for j := lo; j < hi; j++ {
						if issuedAt[j] >= 0 {
							t.Fatalf("layer %d issued at layers %d and %d", j, issuedAt[j], i)
						}
						issuedAt[j] = i
						for o := range inFlight {
							if o%(d+1) == j%(d+1) {
								t.Fatalf("layer %d (issued at %d) shares scratch %d with layer %d, still in flight", j, i, j%(d+1), o)
							}
						}
						inFlight[j] = true
					}
					if len(inFlight) > d+1 {
						t.Fatalf("layer %d: %d read-aheads in flight, past d+1 = %d", i, len(inFlight), d+1)
					}
					if !inFlight[i] {
						t.Fatalf("layer %d runs before its read-ahead was issued", i)
					}
					delete(inFlight, i) // the layer's resolve waits for it
				}
				for j, at := range issuedAt {
					if want := max(j-d, 0); at != want {
						t.Errorf("layer %d read ahead at layer %d, want %d", j, at, want)
					}
				}
			})
		}
	}
}

// NVMAI_GPU_READAHEAD_DIST: unset is 0 (the read-ahead inside the layer,
// validated on a GPU), 0 … maxAheadDist taken, anything else refused
// naming the variable.
func TestAheadDistFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{{"", 0, true}, {"0", 0, true}, {"1", 1, true}, {"2", 2, true}, {"8", 8, true}, {"9", 0, false}, {"-1", 0, false}, {"x", 0, false}} {
		t.Setenv("NVMAI_GPU_READAHEAD_DIST", tc.v)
		got, err := aheadDistFromEnv()
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("%q: %d, %v; want %d", tc.v, got, err, tc.want)
		}
		if !tc.ok && err == nil {
			t.Errorf("%q: %d taken, want an error", tc.v, got)
		}
		if err != nil && !strings.Contains(err.Error(), "NVMAI_GPU_READAHEAD_DIST") {
			t.Errorf("%q: error %q does not name the variable", tc.v, err)
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
