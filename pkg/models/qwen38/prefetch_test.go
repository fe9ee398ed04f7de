package qwen38

import (
	"path/filepath"
	"testing"
)

// predicting is a snapshot that records the read-ahead guesses.
type predicting struct {
	*snapshot
	calls [][2]int // (layer, number of ids) of every Prefetch
}

func (p *predicting) PrefetchWidth() int { return 3 }

func (p *predicting) Prefetch(layer int, ids []int) {
	p.calls = append(p.calls, [2]int{layer, len(ids)})
}

// TestPrefetchGuessesDoNotChangeLogits: decode steps hand every next layer
// its guesses (never during prefill), and the logits are bitwise those of a
// provider that does not prefetch.
func TestPrefetchGuessesDoNotChangeLogits(t *testing.T) {
	dir := filepath.Join(fixturesDir(t), layouts[0])
	s := loadSnapshot(t, dir)
	p := &predicting{snapshot: s}
	cfg := fixtureConfig(t, dir)
	plain, err := New(cfg, s, s, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	guessing, err := New(cfg, s, p, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := loadRefs(t)[3].IDs
	V := cfg.VocabSize
	a, b := make([]float32, V), make([]float32, V)
	sa, sb := plain.NewState(StateOptions{}), guessing.NewState(StateOptions{})
	if err := plain.Forward(sa, ids, a, false); err != nil {
		t.Fatal(err)
	}
	if err := guessing.Forward(sb, ids, b, false); err != nil {
		t.Fatal(err)
	}
	if len(p.calls) != 0 {
		t.Fatalf("prefill made %d guesses", len(p.calls))
	}
	for step := range 4 {
		next := argmax(a)
		if err := plain.Forward(sa, []int{next}, a, false); err != nil {
			t.Fatal(err)
		}
		if err := guessing.Forward(sb, []int{next}, b, false); err != nil {
			t.Fatal(err)
		}
		if i := bitwiseDiff(a, b); i >= 0 {
			t.Fatalf("step %d: logit %d differs with prefetching", step, i)
		}
	}
	if want := 4 * (len(cfg.Layers) - 1); len(p.calls) != want {
		t.Fatalf("%d guesses over 4 steps, want %d", len(p.calls), want)
	}
	for i, c := range p.calls {
		if c[0] != i%(len(cfg.Layers)-1)+1 || c[1] != 3 {
			t.Fatalf("guess %d: layer %d with %d ids", i, c[0], c[1])
		}
	}
}
