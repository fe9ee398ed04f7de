package runtime

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/sample"
)

// allowSet is a Constraint that allows only the ids in set (all of them
// when set is nil), counts its calls and ends after endAfter tokens
// (0: never).
type allowSet struct {
	set          []int
	masks, steps int
	endAfter     int
}

func (c *allowSet) Mask(logits []float32) int {
	c.masks++
	if c.set == nil {
		return len(logits)
	}
	for id := range logits {
		if !slices.Contains(c.set, id) {
			logits[id] = float32(math.Inf(-1))
		}
	}
	return len(c.set)
}

func (c *allowSet) Advance(id int) (bool, error) {
	c.steps++
	if c.set != nil && !slices.Contains(c.set, id) {
		return false, errors.New("not allowed")
	}
	return c.endAfter > 0 && c.steps == c.endAfter, nil
}

// constraintEngine loads the tiny MoE at 8 bits (closed when the test
// ends) and returns it with the prompt the constraint tests generate from.
func constraintEngine(t *testing.T) (*Engine, []int) {
	t.Helper()
	e, err := Load(install(t, "tiny-moe-fused", 8), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, loadRefs(t, "tiny-moe.refs.json")[1].IDs
}

var constraintSamplings = []struct {
	name string
	p    sample.Params
}{
	{"greedy", sample.Params{}},
	{"sampled", sample.Params{Temperature: 0.9, TopK: 40, TopP: 0.9, Seed: 3}},
	{"penalized", sample.Params{Temperature: 1.3, MinP: 0.01, PresencePenalty: 1.5, RepetitionPenalty: 1.3, Seed: 11}},
}

// A constraint that allows everything must not change a single token:
// the hook itself costs nothing to the output.
func TestConstraintAllowingAllChangesNothing(t *testing.T) {
	e, prompt := constraintEngine(t)
	for _, tc := range constraintSamplings {
		t.Run(tc.name, func(t *testing.T) {
			opt := GenerateOptions{MaxTokens: 16, IgnoreEOS: true, Sampling: tc.p}
			free, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, opt)
			if err != nil {
				t.Fatal(err)
			}
			c := &allowSet{}
			opt.Constraint = c
			hooked, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(free.IDs, hooked.IDs) || free.Text != hooked.Text {
				t.Fatalf("an allow-all constraint changed the output:\n%v\n%v", free.IDs, hooked.IDs)
			}
			if c.masks != 16 || c.steps != 16 {
				t.Fatalf("Mask called %d times, Advance %d, want 16 each", c.masks, c.steps)
			}
		})
	}
}

// The mask goes on before penalties, temperature, top-k and top-p: every
// token comes from the allowed set, and OnLogits sees the masked row.
func TestConstraintMasksBeforeSampling(t *testing.T) {
	e, prompt := constraintEngine(t)
	allowed := []int{11, 500, 1234, 4000}
	for _, tc := range constraintSamplings {
		t.Run(tc.name, func(t *testing.T) {
			c := &allowSet{set: allowed}
			res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, GenerateOptions{
				MaxTokens: 12, IgnoreEOS: true, Sampling: tc.p, Constraint: c,
				OnLogits: func(row []float32) error {
					finite := 0
					for _, l := range row {
						if !math.IsInf(float64(l), -1) {
							finite++
						}
					}
					if finite != len(allowed) {
						t.Errorf("OnLogits saw %d finite logits, want %d", finite, len(allowed))
					}
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range res.IDs {
				if !slices.Contains(allowed, id) {
					t.Fatalf("token %d outside the allowed set %v (all: %v)", id, allowed, res.IDs)
				}
			}
		})
	}
}

func TestConstraintEndsGeneration(t *testing.T) {
	e, prompt := constraintEngine(t)
	s := e.NewSession(SessionOptions{})
	res, err := s.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 20, IgnoreEOS: true, Constraint: &allowSet{endAfter: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "eos" || len(res.IDs) != 5 {
		t.Fatalf("stop %q after %d tokens, want eos after 5", res.StopReason, len(res.IDs))
	}
	if got, want := s.Len(), len(prompt)+4; got != want || !slices.Equal(s.pending, res.IDs[4:]) {
		t.Fatalf("session fed %d tokens and holds %v pending, want %d fed and the ending token pending", got, s.pending, want)
	}
}

// A constraint that leaves nothing allowed ends generation with an error
// naming it, not with a token the mask refused.
func TestConstraintDeadEndIsAnError(t *testing.T) {
	e, prompt := constraintEngine(t)
	for _, tc := range constraintSamplings {
		_, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, GenerateOptions{
			MaxTokens: 4, Sampling: tc.p, Constraint: &allowSet{set: []int{}},
		})
		if !errors.Is(err, ErrConstraintDeadEnd) {
			t.Fatalf("%s: err %v, want ErrConstraintDeadEnd", tc.name, err)
		}
	}
}
