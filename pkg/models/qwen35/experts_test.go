package qwen35

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// TestExpertsAcquiredOncePerChunk checks the grouping: in one Forward every
// MoE layer acquires each routed expert exactly once, in ascending order,
// and releases everything.
func TestExpertsAcquiredOncePerChunk(t *testing.T) {
	m, sw := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[pick(2, 4)].IDs
	st := m.NewState(StateOptions{})
	if err := m.Forward(st, ids, nil, false); err != nil {
		t.Fatal(err)
	}
	if len(sw.acquires) != len(m.Config().Layers) {
		t.Fatalf("%d Acquire calls for %d MoE layers", len(sw.acquires), len(m.Config().Layers))
	}
	for i, got := range sw.acquires {
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Errorf("layer %d: ids %v not ascending and distinct", sw.layers[i], got)
		}
		if len(got) < m.Config().ExpertsPerToken {
			t.Errorf("layer %d: only %d experts for %d tokens", sw.layers[i], len(got), len(ids))
		}
	}
	if sw.live != 0 {
		t.Errorf("%d acquired batches never released", sw.live)
	}
}

// TestAcquireLimit bounds every Acquire to 3 experts (a slot cache smaller
// than the chunk's working set) and checks the logits do not move a bit.
func TestAcquireLimit(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[pick(0, 4)].IDs
	want, _ := prefill(t, m, StateOptions{}, ids, []int{len(ids)})

	m2, sw := fixtureModels[0].open(t, nil)
	sw.maxAcquire = 3
	got, _ := prefill(t, m2, StateOptions{}, ids, []int{len(ids)})
	if i := bitwiseDiff(got, want); i >= 0 {
		t.Fatalf("MaxAcquire 3: logit %d = %v, unlimited %v", i, got[i], want[i])
	}
	if len(sw.acquires) <= len(m.Config().Layers) {
		t.Fatalf("%d Acquire calls for %d layers: no layer was split, the test exercises nothing", len(sw.acquires), len(m.Config().Layers))
	}
	for _, a := range sw.acquires {
		if len(a) > 3 {
			t.Fatalf("Acquire of %d experts with MaxAcquire 3", len(a))
		}
	}
	if sw.live != 0 {
		t.Errorf("%d batches never released", sw.live)
	}
}

// TestPerExpertLayout runs the per-expert checkpoint: transformers' two
// expert layouts hold the same numbers, so the logits must be bitwise equal.
func TestPerExpertLayout(t *testing.T) {
	dir := filepath.Join(fixturesDir(t), "tiny-moe-perexpert")
	sw := loadSnapshot(t, dir)
	m, err := New(fixtureConfig(t, dir), sw, sw, nil)
	if err != nil {
		t.Fatal(err)
	}
	fused, _ := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[pick(0, 2)].IDs
	want, _ := prefill(t, fused, StateOptions{}, ids, []int{len(ids)})
	got, _ := prefill(t, m, StateOptions{}, ids, []int{len(ids)})
	if i := bitwiseDiff(got, want); i >= 0 {
		t.Fatalf("per-expert logit %d = %v, fused %v", i, got[i], want[i])
	}
}

// failingExperts fails the n-th Acquire.
type failingExperts struct {
	model.Experts
	calls, failAt int
}

func (f *failingExperts) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	f.calls++
	if f.calls == f.failAt {
		return nil, nil, errors.New("disk on fire")
	}
	return f.Experts.Acquire(layer, ids)
}

// TestFailedForwardPoisonsState checks that an expert read failure is
// reported with its layer and leaves the state refusing work until Reset.
func TestFailedForwardPoisonsState(t *testing.T) {
	fx := fixturesDir(t)
	dir := filepath.Join(fx, "tiny-moe-fused")
	sw := loadSnapshot(t, dir)
	fe := &failingExperts{Experts: sw, failAt: 3}
	m, err := New(fixtureConfig(t, dir), sw, fe, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := loadRefs(t, filepath.Join(fx, fixtureModels[0].refs))[0]
	st := m.NewState(StateOptions{})
	err = m.Forward(st, ref.IDs, nil, false)
	if err == nil || !strings.Contains(err.Error(), "layer 2") || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("error %v, want one naming layer 2 and the cause", err)
	}
	if err := m.Forward(st, ref.IDs[:1], nil, false); err == nil || !strings.Contains(err.Error(), "Reset") {
		t.Fatalf("a poisoned state accepted work: %v", err)
	}
	st.Reset()
	V := m.Config().VocabSize
	logits := make([]float32, V)
	if err := m.Forward(st, ref.IDs, logits, false); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if d := maxAbsDiff(logits, ref.LastLogits); d > logitTol {
		t.Errorf("after Reset: max abs diff %.3g", d)
	}
}

// visitingExperts serves experts through Visit in a scrambled order (odd
// indices descending, then even ones ascending), as a cache handing over
// resident experts first would; skip and twice break the contract.
type visitingExperts struct {
	*snapshotWeights
	visits      int
	skip, twice bool
}

func (v *visitingExperts) Visit(layer int, ids []int, fn func(int, model.ExpertMats) error) error {
	v.visits++
	var order []int
	for i := len(ids) - 1; i >= 0; i-- {
		if i%2 == 1 {
			order = append(order, i)
		}
	}
	for i := 0; i < len(ids); i += 2 {
		order = append(order, i)
	}
	if v.skip {
		order = order[1:]
	}
	if v.twice {
		order = append(order, order[0])
	}
	for _, i := range order {
		em, err := v.Expert(layer, ids[i])
		if err != nil {
			return err
		}
		if err := fn(i, em); err != nil {
			return err
		}
	}
	return nil
}

// expertFixture is the tiny MoE fixture's directory, its first reference
// prompt, and the logits of a full prefill of it through the plain Acquire
// path: what every other way of handing experts over must reproduce.
func expertFixture(t *testing.T) (dir string, ref refPrompt, want []float32) {
	t.Helper()
	fx := fixturesDir(t)
	dir = filepath.Join(fx, "tiny-moe-fused")
	ref = loadRefs(t, filepath.Join(fx, fixtureModels[0].refs))[0]
	plain, _ := fixtureModels[0].open(t, nil)
	want, _ = prefill(t, plain, StateOptions{}, ref.IDs, []int{len(ref.IDs)})
	return dir, ref, want
}

// TestExpertVisitor checks that Experts implementing Visit are used through
// it, that the arrival order changes no bit, and that a Visit breaking its
// contract is caught.
func TestExpertVisitor(t *testing.T) {
	dir, ref, want := expertFixture(t)
	sw := loadSnapshot(t, dir)
	ve := &visitingExperts{snapshotWeights: sw}
	m, err := New(fixtureConfig(t, dir), sw, ve, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := prefill(t, m, StateOptions{}, ref.IDs, []int{len(ref.IDs)})
	if i := bitwiseDiff(got, want); i >= 0 {
		t.Fatalf("visit order: logit %d = %v, Acquire %v", i, got[i], want[i])
	}
	if ve.visits != len(m.Config().Layers) || len(sw.acquires) != 0 {
		t.Errorf("%d Visit and %d Acquire calls; want one Visit per layer and no Acquire", ve.visits, len(sw.acquires))
	}
	for _, tc := range []struct {
		name string
		ve   *visitingExperts
		want string
	}{
		{"skipped expert", &visitingExperts{snapshotWeights: sw, skip: true}, "never handed over"},
		{"expert twice", &visitingExperts{snapshotWeights: sw, twice: true}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(fixtureConfig(t, dir), sw, tc.ve, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = m.Forward(m.NewState(StateOptions{}), ref.IDs, nil, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// groupVisitingExperts hands a layer's experts over in groups: the odd
// indices together (last first), then the even ones one by one.
type groupVisitingExperts struct {
	*snapshotWeights
	groups, fused int
}

func (v *groupVisitingExperts) VisitGroups(layer int, ids []int, fn func([]int, []model.ExpertMats) error) error {
	var odd []int
	for i := len(ids) - 1; i >= 0; i-- {
		if i%2 == 1 {
			odd = append(odd, i)
		}
	}
	groups := [][]int{odd}
	for i := 0; i < len(ids); i += 2 {
		groups = append(groups, []int{i})
	}
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		var mats []model.ExpertMats
		for _, i := range g {
			em, err := v.Expert(layer, ids[i])
			if err != nil {
				return err
			}
			mats = append(mats, em)
		}
		v.groups++
		if len(g) > 1 {
			v.fused++
		}
		if err := fn(g, mats); err != nil {
			return err
		}
	}
	return nil
}

// TestExpertGroupVisitor: decode through VisitGroups (fused groups of
// experts, one pool job per projection, on 1 to 3 threads) gives bitwise
// the logits of the plain Acquire path.
func TestExpertGroupVisitor(t *testing.T) {
	dir, ref, want := expertFixture(t)
	sw := loadSnapshot(t, dir)
	for _, threads := range []int{1, 2, 3} {
		pool := kernels.NewPool(threads)
		ge := &groupVisitingExperts{snapshotWeights: sw}
		m, err := New(fixtureConfig(t, dir), sw, ge, pool)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := prefill(t, m, StateOptions{}, ref.IDs, ones(len(ref.IDs)))
		pool.Close()
		if i := bitwiseDiff(got, want); i >= 0 {
			t.Fatalf("%d threads: logit %d = %v, Acquire path %v", threads, i, got[i], want[i])
		}
		if ge.fused == 0 || len(sw.acquires) != 0 {
			t.Fatalf("%d threads: %d fused groups of %d, %d Acquire calls; want fused groups and no Acquire", threads, ge.fused, ge.groups, len(sw.acquires))
		}
	}
}
