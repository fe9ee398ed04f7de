package runtime

import (
	"context"
	"slices"
	"testing"
)

// idleThenSet is idle for its first idleSteps tokens, then allows only set.
type idleThenSet struct {
	allowSet
	idleSteps int
}

func (c *idleThenSet) Idle() bool { return c.steps < c.idleSteps }

func (c *idleThenSet) Advance(id int) (bool, error) {
	if c.Idle() {
		c.steps++
		return false, nil
	}
	return c.allowSet.Advance(id)
}

// An IdleConstraint is not asked to mask while it is idle (a device then
// samples where the row is), its Advance still sees every token, and the
// output is that of no constraint until it stops being idle.
func TestIdleConstraintSkipsTheMask(t *testing.T) {
	e, prompt := constraintEngine(t)
	for _, tc := range constraintSamplings {
		t.Run(tc.name, func(t *testing.T) {
			opt := GenerateOptions{MaxTokens: 12, IgnoreEOS: true, Sampling: tc.p}
			free, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, opt)
			if err != nil {
				t.Fatal(err)
			}
			allowed := []int{11, 500, 1234, 4000}
			c := &idleThenSet{allowSet: allowSet{set: allowed}, idleSteps: 5}
			opt.Constraint = c
			res, err := e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.IDs[:5], free.IDs[:5]) {
				t.Fatalf("idle steps changed the output: %v, free %v", res.IDs[:5], free.IDs[:5])
			}
			for _, id := range res.IDs[5:] {
				if !slices.Contains(allowed, id) {
					t.Fatalf("token %d outside %v once not idle (all: %v)", id, allowed, res.IDs)
				}
			}
			if c.masks != 7 || c.steps != 12 {
				t.Fatalf("Mask called %d times, Advance %d; want 7 and 12", c.masks, c.steps)
			}
		})
	}
}
