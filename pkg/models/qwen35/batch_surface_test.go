package qwen35

import (
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

// TestStepBatchSurface: the CPU engine's model.BatchStepper sets each
// state's logits (LastLogits, Argmax) bitwise as its own Forward does, with
// and without a logits buffer, and refuses states of another model.
func TestStepBatchSurface(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	other, _ := fixtureModels[0].open(t, nil)
	var cpu model.Model = &CPU{Model: m}
	stepper, ok := cpu.(model.BatchStepper)
	if !ok {
		t.Fatal("the CPU model is no model.BatchStepper")
	}
	V := m.Config().VocabSize
	newState := func(c model.Model, prompt []int) model.State {
		st, err := c.NewState(model.StateOptions{KVBits: KVInt8})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Forward(prompt); err != nil {
			t.Fatal(err)
		}
		return st
	}
	var batched, alone []model.State
	for i := range 3 {
		p := promptOf(i, 2+2*i, V)
		batched, alone = append(batched, newState(cpu, p)), append(alone, newState(cpu, p))
	}
	for s, withLogits := range []bool{false, true, false} {
		ids := make([]int, len(batched))
		for i, st := range alone {
			id, err := st.Argmax()
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = id
		}
		var logits []float32
		if withLogits {
			logits = make([]float32, len(batched)*V)
		}
		if err := stepper.StepBatch(batched, ids, logits); err != nil {
			t.Fatal(err)
		}
		for i, st := range alone {
			if err := st.Forward(ids[i : i+1]); err != nil {
				t.Fatal(err)
			}
			want := st.(model.HostLogits).LastLogits()
			if d := bitwiseDiff(batched[i].(model.HostLogits).LastLogits(), want); d >= 0 {
				t.Fatalf("step %d: state %d: logit %d differs from its own Forward", s, i, d)
			}
			if withLogits {
				if d := bitwiseDiff(logits[i*V:(i+1)*V], want); d >= 0 {
					t.Fatalf("step %d: row %d of logits: logit %d differs from its own Forward", s, i, d)
				}
			}
			a, _ := batched[i].Argmax()
			b, _ := st.Argmax()
			if a != b {
				t.Fatalf("step %d: state %d: Argmax %d batched, %d alone", s, i, a, b)
			}
		}
	}
	foreign := newState(&CPU{Model: other}, []int{1})
	for _, tc := range []struct {
		name   string
		states []model.State
		want   string
	}{
		{"another model's state", []model.State{batched[0], foreign}, "state 1 (*qwen35.CPUState) is not a state of this model"},
		{"nil state", []model.State{nil, batched[0]}, "state 0 (<nil>) is not a state of this model"},
		{"nil CPUState", []model.State{batched[0], (*CPUState)(nil)}, "state 1 (*qwen35.CPUState) is not a state of this model"},
		{"duplicate", []model.State{batched[1], batched[1]}, "state 1 is also state 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := batched[0].Len()
			err := stepper.StepBatch(tc.states, make([]int, len(tc.states)), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if batched[0].Len() != before {
				t.Errorf("a refused batch moved state 0 from %d to %d tokens", before, batched[0].Len())
			}
		})
	}
}
