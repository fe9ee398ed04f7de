package qwen35

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

// TestStepProfile checks that a StepProfile counts decode steps only, sees
// the phases each model has, charges lm_head its own bytes once per step,
// and leaves the logits bitwise alone.
func TestStepProfile(t *testing.T) {
	wantPhases := map[string][]model.StepPhase{
		"tiny-moe":   {model.PhaseNorms, model.PhaseGDNProjections, model.PhaseGDNConv, model.PhaseGDNHeads, model.PhaseGDNOut, model.PhaseAttnProjections, model.PhaseAttnHeads, model.PhaseAttnOut, model.PhaseRouter, model.PhaseRouting, model.PhaseExpertGateUp, model.PhaseExpertDown, model.PhaseCombine, model.PhaseLMHead},
		"tiny-dense": {model.PhaseNorms, model.PhaseGDNProjections, model.PhaseGDNConv, model.PhaseGDNHeads, model.PhaseGDNOut, model.PhaseAttnProjections, model.PhaseAttnHeads, model.PhaseAttnOut, model.PhaseLMHead},
	}
	for _, fm := range fixtureModels {
		t.Run(fm.name, func(t *testing.T) {
			m, _ := fm.open(t, nil)
			ids := []int{1, 2, 3, 4, 5, 6, 7, 8}
			V := m.Config().VocabSize
			run := func(p *model.StepProfile) []float32 {
				st := m.NewState(StateOptions{})
				st.SetStepProfile(p)
				logits := make([]float32, V)
				if err := m.Forward(st, ids[:5], logits, false); err != nil {
					t.Fatal(err)
				}
				out := append([]float32(nil), logits...)
				for _, id := range ids[5:] {
					if err := m.Forward(st, []int{id}, logits, false); err != nil {
						t.Fatal(err)
					}
					out = append(out, logits...)
				}
				return out
			}
			var p model.StepProfile
			with, without := run(&p), run(nil)
			if i := bitwiseDiff(with, without); i >= 0 {
				t.Fatalf("logit %d differs with the profile on", i)
			}
			if p.Steps != 3 {
				t.Fatalf("Steps = %d, want 3 (the prefill is not a step)", p.Steps)
			}
			for _, ph := range wantPhases[fm.name] {
				if p.Time[ph] <= 0 {
					t.Errorf("phase %v has no time", ph)
				}
			}
			if got, want := p.Bytes[model.PhaseLMHead], 3*model.MatrixBytes(m.lmHead); got != want {
				t.Errorf("lm_head bytes %d, want %d", got, want)
			}
		})
	}
}

func TestStepPhaseNames(t *testing.T) {
	seen := map[string]bool{}
	for ph := range model.NumStepPhases {
		name := ph.String()
		if name == "" || name == "unknown" || seen[name] {
			t.Errorf("phase %d has name %q", ph, name)
		}
		seen[name] = true
	}
}
