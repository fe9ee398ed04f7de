package qwen35

import (
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

// predictingExperts records every Prefetch and every layer's request.
type predictingExperts struct {
	*snapshotWeights
	width     int
	guesses   map[int][]int // layer → the latest guess, until that layer asks
	prefetch  int           // Prefetch calls
	guessed   int           // guessed experts a layer then asked for
	guessRuns int           // layers that asked with a guess pending
}

func (p *predictingExperts) PrefetchWidth() int { return p.width }

func (p *predictingExperts) Prefetch(layer int, ids []int) {
	p.prefetch++
	p.guesses[layer] = append([]int(nil), ids...)
}

func (p *predictingExperts) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	if g, ok := p.guesses[layer]; ok {
		delete(p.guesses, layer)
		p.guessRuns++
		for _, e := range ids {
			if slices.Contains(g, e) {
				p.guessed++
			}
		}
	}
	return p.snapshotWeights.Acquire(layer, ids)
}

// TestPrefetchPredictions: decode asks the provider to read ahead before
// every layer but the first, with PrefetchWidth guesses, changes no bit of
// the logits, and the guesses (the next layer's router on the hidden state
// before that layer's attention) mostly name experts the layer then uses
// on the trained fixture.
func TestPrefetchPredictions(t *testing.T) {
	dir, ref, want := expertFixture(t)
	sw := loadSnapshot(t, dir)
	cfg := fixtureConfig(t, dir)
	k := cfg.ExpertsPerToken
	for _, width := range []int{0, 1, k} {
		pe := &predictingExperts{snapshotWeights: sw, width: width, guesses: map[int][]int{}}
		m, err := New(cfg, sw, pe, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := prefill(t, m, StateOptions{}, ref.IDs, ones(len(ref.IDs)))
		if i := bitwiseDiff(got, want); i >= 0 {
			t.Fatalf("width %d: logit %d = %v, without prediction %v", width, i, got[i], want[i])
		}
		steps, layers := len(ref.IDs), len(cfg.Layers)
		if width == 0 {
			if pe.prefetch != 0 {
				t.Fatalf("width 0: %d Prefetch calls, want none", pe.prefetch)
			}
			continue
		}
		if pe.prefetch != steps*(layers-1) || pe.guessRuns != pe.prefetch {
			t.Fatalf("width %d: %d Prefetch calls, %d layers asked after one; want %d of each (every layer but the first, every step)",
				width, pe.prefetch, pe.guessRuns, steps*(layers-1))
		}
		precision := float64(pe.guessed) / float64(width*pe.guessRuns)
		t.Logf("width %d: %.1f%% of %d guesses were asked for", width, 100*precision, width*pe.guessRuns)
		if precision < 0.6 {
			t.Errorf("width %d: only %.1f%% of guesses asked for; the prediction is broken", width, 100*precision)
		}
	}
}
