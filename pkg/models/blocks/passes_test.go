package blocks

import (
	"fmt"
	"strings"
	"testing"
)

// TestChunksSplitsIdsAndLogits: each pass gets its tokens and the logits
// rows it fills, and without allLogits only the last pass fills the one row.
func TestChunksSplitsIdsAndLogits(t *testing.T) {
	const V = 2
	ids := []int{0, 1, 2, 3, 4}
	all := make([]float32, len(ids)*V)
	last := make([]float32, V)
	for _, tc := range []struct {
		name      string
		logits    []float32
		allLogits bool
		chunk     int
		want      string // per pass: ids → the offset of out in logits and its length, or nil
	}{
		{"all rows", all, true, 2, "[0 1]→0+4 [2 3]→4+4 [4]→8+2"},
		{"last row", last, false, 2, "[0 1]→nil [2 3]→nil [4]→0+2"},
		{"no logits", nil, true, 3, "[0 1 2]→nil [3 4]→nil"},
		{"one pass", last, false, 9, "[0 1 2 3 4]→0+2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			p := Chunks(len(ids), tc.logits, tc.allLogits, V, tc.chunk)
			for p.Next() {
				pass, out := ids[p.Start:p.End], p.Out
				if out == nil {
					got = append(got, fmt.Sprintf("%v→nil", pass))
					continue
				}
				off := cap(tc.logits) - cap(out)
				got = append(got, fmt.Sprintf("%v→%d+%d", pass, off, len(out)))
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Fatalf("passes %s, want %s", s, tc.want)
			}
		})
	}
}

// TestChunksEndsAfterTheLastPass: Next keeps saying there is no more.
func TestChunksEndsAfterTheLastPass(t *testing.T) {
	p := Chunks(3, nil, false, 1, 2)
	for range 2 {
		if !p.Next() {
			t.Fatal("a pass is missing")
		}
	}
	for range 2 {
		if p.Next() {
			t.Fatalf("a pass [%d, %d) after the last", p.Start, p.End)
		}
	}
}

// TestChunksAllocatesNothing: the pass loop runs once a Forward, so once a
// decoded token; it must cost no allocation, and the token slice a decode
// step passes must not escape to the heap.
func TestChunksAllocatesNothing(t *testing.T) {
	logits := make([]float32, 4)
	var rows int
	if n := testing.AllocsPerRun(100, func() {
		rows += countRows([]int{1}, logits)
	}); n != 0 {
		t.Fatalf("%v allocations a loop, want 0", n)
	}
}

func TestCheckForward(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ids       []int
		logits    int // values; −1 for nil
		allLogits bool
		pos       int
		want      string // "" for no error
	}{
		{"fits", []int{1, 2}, 6, true, 0, ""},
		{"nil logits", []int{1, 2}, -1, false, 6, ""},
		{"no tokens", nil, 3, false, 0, "x: Forward: no tokens"},
		{"token past the vocabulary", []int{1, 3}, 3, false, 0, "x: Forward: token 3 at index 1 is outside the vocabulary [0, 3)"},
		{"negative token", []int{-1}, 3, false, 0, "token -1 at index 0"},
		{"logits for one row", []int{1, 2}, 6, false, 0, "x: Forward: logits has 6 values, want 1 rows × vocab 3 = 3"},
		{"logits for every row", []int{1, 2}, 3, true, 0, "want 2 rows × vocab 3 = 6"},
		{"past max context", []int{1, 2}, 3, false, 7, "x: Forward: 2 tokens after 7 would pass the state's max context of 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logits []float32
			if tc.logits >= 0 {
				logits = make([]float32, tc.logits)
			}
			err := CheckForward("x", tc.ids, logits, tc.allLogits, 3, tc.pos, 8)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

//go:noinline
func countRows(ids []int, logits []float32) int {
	rows := 0
	p := Chunks(len(ids), logits, false, 4, 3)
	for p.Next() {
		rows += len(p.Out) + sink(ids[p.Start:p.End], p.Out)
	}
	return rows
}

// sink stands for forwardChunk: it keeps the logits (a pool job may hold
// them) and reads the ids.
//
//go:noinline
func sink(ids []int, out []float32) int {
	kept = out
	return len(ids)
}

var kept []float32
