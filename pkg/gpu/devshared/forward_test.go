package devshared

import (
	"errors"
	"strings"
	"testing"
)

// The engines' Forward refusals, word for word as each engine wrote them
// before they were shared.
func TestCheckForward(t *testing.T) {
	for _, tc := range []struct {
		name, engine string
		failed       error
		ids          []int
		pos, maxCtx  int
		want         string
	}{
		{"ok", "gpu", nil, []int{0, 9}, 0, 4, ""},
		{"failed", "qwen38gpu", errors.New("boom"), []int{1}, 0, 4, "qwen38gpu: the sequence failed earlier (boom); start a new one"},
		{"empty", "gpu", nil, nil, 0, 4, "gpu: Forward: no tokens"},
		{"negative", "gpu", nil, []int{1, -1}, 0, 4, "gpu: Forward: token -1 at index 1 is outside the vocabulary [0, 10)"},
		{"past vocab", "qwen38gpu", nil, []int{10}, 0, 4, "qwen38gpu: Forward: token 10 at index 0 is outside the vocabulary [0, 10)"},
		{"past context", "gpu", nil, []int{1, 2}, 3, 4, "gpu: Forward: 2 tokens after 3 would pass the max context of 4"},
		{"fills context", "gpu", nil, []int{1}, 3, 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckForward(tc.engine, tc.failed, tc.ids, 10, tc.pos, tc.maxCtx)
			if got := ""; err != nil {
				got = err.Error()
				if got != tc.want {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			} else if tc.want != "" {
				t.Fatalf("no error, want %q", tc.want)
			}
		})
	}
}

// RunForward grows the KV cache by doubling up to the max context, keeps
// the tokens held, passes chunks in order and syncs only a prefill (the
// sync needs a device, so only single-token feeds run here).
func TestRunForwardGrowsAndChunks(t *testing.T) {
	for _, tc := range []struct {
		pos, kcap, maxCtx, wantCap int
	}{
		{pos: 0, kcap: 4, maxCtx: 100, wantCap: 0},
		{pos: 4, kcap: 4, maxCtx: 100, wantCap: 8},
		{pos: 16, kcap: 4, maxCtx: 100, wantCap: 32},
		{pos: 70, kcap: 64, maxCtx: 100, wantCap: 100},
	} {
		gotCap, gotKeep := 0, -1
		var chunks [][]int
		err := RunForward(nil, []int{7}, tc.pos, tc.kcap, tc.maxCtx, 2,
			func(capacity, keep int) error { gotCap, gotKeep = capacity, keep; return nil },
			func(chunk []int) error { chunks = append(chunks, chunk); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if gotCap != tc.wantCap || (tc.wantCap != 0 && gotKeep != tc.pos) {
			t.Errorf("pos %d kcap %d: grew to %d keeping %d, want %d keeping %d", tc.pos, tc.kcap, gotCap, gotKeep, tc.wantCap, tc.pos)
		}
		if len(chunks) != 1 || len(chunks[0]) != 1 || chunks[0][0] != 7 {
			t.Errorf("chunks %v, want [[7]]", chunks)
		}
	}
	wantErr := errors.New("no room")
	err := RunForward(nil, []int{1}, 8, 8, 16, 2, func(int, int) error { return wantErr }, func([]int) error {
		t.Fatal("a pass ran after the KV cache failed to grow")
		return nil
	})
	if !errors.Is(err, wantErr) || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("got %v, want %v", err, wantErr)
	}
}
