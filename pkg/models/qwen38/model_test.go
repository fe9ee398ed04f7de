package qwen38

import (
	"fmt"
	"testing"
)

// logitTol is the bound for 16-bit installs against transformers.
const logitTol = 1e-3

// TestLastLogitsMatchTransformers: for every reference prompt and both
// layouts, the logits after the last prompt token are within logitTol of
// transformers', and the argmax at every position agrees.
func TestLastLogitsMatchTransformers(t *testing.T) {
	for _, layout := range layouts {
		m := open(t, layout, nil)
		V := m.Config().VocabSize
		for i, r := range loadRefs(t) {
			if quickTests() && len(r.IDs) > 120 {
				continue // its last logits need the whole prompt
			}
			t.Run(fmt.Sprintf("%s/%d", layout, i), func(t *testing.T) {
				st := m.NewState(StateOptions{})
				logits := make([]float32, len(r.IDs)*V)
				if err := m.Forward(st, r.IDs, logits, true); err != nil {
					t.Fatal(err)
				}
				last := logits[(len(r.IDs)-1)*V:]
				if d := maxAbsDiff(last, r.LastLogits); d > logitTol {
					t.Errorf("%q (%d tokens): last logits differ by %.3g", r.Text[:min(30, len(r.Text))], len(r.IDs), d)
				} else {
					t.Logf("%d tokens: max |Δ| %.2g", len(r.IDs), d)
				}
				for p, want := range r.ArgmaxPerPosition {
					if got := argmax(logits[p*V : (p+1)*V]); got != want {
						t.Errorf("position %d: argmax %d, transformers %d", p, got, want)
						break
					}
				}
			})
		}
	}
}
