package qwen35

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
)

// batchModel is a model the batch tests step: each way experts are handed
// over (resident Acquire, the per-expert layout, Visit and VisitGroups as
// the streaming expert cache hands them, with prediction) and the dense
// architecture.
type batchModel struct {
	name string
	open func(t testing.TB) *Model
}

func batchModels() []batchModel {
	moe := func(t testing.TB, dir string, ex func(*snapshotWeights) model.Experts, threads int) *Model {
		t.Helper()
		dir = filepath.Join(fixturesDir(t), dir)
		sw := loadSnapshot(t, dir)
		var pool *kernels.Pool
		if threads > 1 {
			pool = kernels.NewPool(threads)
			t.Cleanup(pool.Close)
		}
		m, err := New(fixtureConfig(t, dir), sw, ex(sw), pool)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	plain := func(sw *snapshotWeights) model.Experts { return sw }
	return []batchModel{
		{"moe-fused", func(t testing.TB) *Model { return moe(t, "tiny-moe-fused", plain, 1) }},
		{"moe-perexpert", func(t testing.TB) *Model { return moe(t, "tiny-moe-perexpert", plain, 1) }},
		{"moe-visit", func(t testing.TB) *Model {
			return moe(t, "tiny-moe-fused", func(sw *snapshotWeights) model.Experts { return &visitingExperts{snapshotWeights: sw} }, 1)
		}},
		{"moe-groups-3-threads", func(t testing.TB) *Model {
			return moe(t, "tiny-moe-fused", func(sw *snapshotWeights) model.Experts { return &groupVisitingExperts{snapshotWeights: sw} }, 3)
		}},
		{"moe-prefetch", func(t testing.TB) *Model {
			return moe(t, "tiny-moe-fused", func(sw *snapshotWeights) model.Experts {
				return &predictingExperts{snapshotWeights: sw, width: 4, guesses: map[int][]int{}}
			}, 1)
		}},
		{"dense-2-threads", func(t testing.TB) *Model {
			dir := filepath.Join(fixturesDir(t), "tiny-dense")
			pool := kernels.NewPool(2)
			t.Cleanup(pool.Close)
			m, err := New(fixtureConfig(t, dir), loadSnapshot(t, dir), nil, pool)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}},
	}
}

// batchStep is one step of a schedule: the sequences in alone are first
// stepped alone (Forward), then those in batch are stepped together in
// that order.
type batchStep struct {
	alone    []int
	batch    []int
	noLogits bool // the batch passes nil logits (its next tokens are made up)
}

// twinSeq is one sequence twice: stepped in batches, and alone.
type twinSeq struct {
	batched, alone *State
	next           int // the token both take next
}

// promptOf is a made-up prompt of n tokens for sequence i.
func promptOf(i, n, vocab int) []int {
	ids := make([]int, n)
	for j := range ids {
		ids[j] = (i*131 + j*37 + 5) % vocab
	}
	return ids
}

// runSchedule prefills each prompt into a twin pair (KV widths taken in
// turn from kvBits), runs steps, checking after every step that each
// batched state's logits, greedy pick and state are bitwise those of its
// twin stepped alone with Forward, and finally steps every pair alone once
// more.
func runSchedule(t *testing.T, m *Model, prompts [][]int, kvBits []int, steps []batchStep) {
	t.Helper()
	runRoutedSchedule(t, m, prompts, kvBits, steps, nil)
}

// runRoutedSchedule is runSchedule with both twins of sequence i replaying
// the routing routes(i) names (routes nil: the router's own).
func runRoutedSchedule(t *testing.T, m *Model, prompts [][]int, kvBits []int, steps []batchStep, routes func(i int) model.RouteOverride) {
	t.Helper()
	V := m.Config().VocabSize
	want := make([]float32, V)
	seqs := make([]twinSeq, len(prompts))
	for i, p := range prompts {
		opts := StateOptions{KVBits: kvBits[i%len(kvBits)], KVInitial: 2} // KV grows during the batches
		seqs[i] = twinSeq{batched: m.NewState(opts), alone: m.NewState(opts)}
		if routes != nil {
			seqs[i].batched.SetRouteOverride(routes(i))
			seqs[i].alone.SetRouteOverride(routes(i))
		}
		if err := m.Forward(seqs[i].batched, p, nil, false); err != nil {
			t.Fatal(err)
		}
		if err := m.Forward(seqs[i].alone, p, want, false); err != nil {
			t.Fatal(err)
		}
		seqs[i].next = argmax(want)
	}
	got := make([]float32, V)
	stepAlone := func(i int, when string) {
		t.Helper()
		s := &seqs[i]
		if err := m.Forward(s.batched, []int{s.next}, got, false); err != nil {
			t.Fatalf("%s: sequence %d alone: %v", when, i, err)
		}
		if err := m.Forward(s.alone, []int{s.next}, want, false); err != nil {
			t.Fatalf("%s: twin %d: %v", when, i, err)
		}
		if d := bitwiseDiff(got, want); d >= 0 {
			t.Fatalf("%s: sequence %d stepped alone: logit %d = %v, twin %v", when, i, d, got[d], want[d])
		}
		assertSameState(t, s.batched, s.alone)
		s.next = argmax(want)
	}
	for si, step := range steps {
		for _, i := range step.alone {
			stepAlone(i, fmt.Sprintf("step %d", si))
		}
		N := len(step.batch)
		states, ids := make([]*State, N), make([]int, N)
		for j, i := range step.batch {
			states[j], ids[j] = seqs[i].batched, seqs[i].next
		}
		var logits []float32
		if !step.noLogits {
			logits = make([]float32, N*V)
		}
		if err := m.ForwardBatch(states, ids, logits); err != nil {
			t.Fatalf("step %d: batch %v: %v", si, step.batch, err)
		}
		for j, i := range step.batch {
			s := &seqs[i]
			if step.noLogits {
				if err := m.Forward(s.alone, ids[j:j+1], nil, false); err != nil {
					t.Fatal(err)
				}
				s.next = (ids[j]*7 + 1) % V
			} else {
				if err := m.Forward(s.alone, ids[j:j+1], want, false); err != nil {
					t.Fatal(err)
				}
				row := logits[j*V : (j+1)*V]
				if d := bitwiseDiff(row, want); d >= 0 {
					t.Fatalf("step %d: batch %v: row %d (sequence %d) logit %d = %v, alone %v", si, step.batch, j, i, d, row[d], want[d])
				}
				if a, b := argmax(row), argmax(want); a != b {
					t.Fatalf("step %d: sequence %d: greedy %d in the batch, %d alone", si, i, a, b)
				}
				s.next = argmax(want)
			}
			assertSameState(t, s.batched, s.alone)
		}
	}
	for i := range seqs {
		stepAlone(i, "after the batches")
	}
}

// TestForwardBatchIsBitwiseAlone: batches of 1, 2, 3 and 5 sequences of
// different lengths and KV widths, whose membership and order change from
// step to step (leaving, joining, stepped alone in between), give every
// sequence bitwise the logits, greedy tokens and state of stepping it
// alone, on every way of handing experts over and on the dense model.
func TestForwardBatchIsBitwiseAlone(t *testing.T) {
	schedules := []struct {
		name    string
		prompts []int // prompt lengths
		kvBits  []int
		steps   []batchStep
	}{
		{"N=1", []int{5}, []int{KVFloat32}, []batchStep{{batch: []int{0}}, {batch: []int{0}}, {batch: []int{0}, noLogits: true}, {batch: []int{0}}}},
		{"N=2 swapped", []int{3, 9}, []int{KVInt8, KVFloat32}, []batchStep{
			{batch: []int{0, 1}}, {batch: []int{1, 0}}, {batch: []int{1}}, {alone: []int{0}, batch: []int{0, 1}}, {batch: []int{1, 0}, noLogits: true}, {batch: []int{0, 1}},
		}},
		{"N=3 join and leave", []int{1, 4, 7}, []int{KVBF16, KVInt8, KVFloat32}, []batchStep{
			{batch: []int{0, 1}}, {batch: []int{2, 0, 1}}, {alone: []int{0}, batch: []int{1, 2}}, {batch: []int{2, 1, 0}}, {batch: []int{0}}, {batch: []int{0, 2, 1}},
		}},
		{"N=5 shuffled", []int{2, 3, 5, 8, 13}, []int{KVInt8, KVFloat32, KVBF16}, []batchStep{
			{batch: []int{0, 1, 2}}, {batch: []int{3, 4, 0, 1, 2}}, {alone: []int{1, 3}, batch: []int{4, 2, 0}},
			{batch: []int{1, 3}}, {batch: []int{0, 1, 2, 3, 4}, noLogits: true}, {batch: []int{4, 3, 2, 1, 0}}, {batch: []int{2, 4, 1, 3, 0}},
		}},
	}
	for _, bm := range batchModels() {
		t.Run(bm.name, func(t *testing.T) {
			m := bm.open(t)
			for _, sc := range schedules {
				t.Run(sc.name, func(t *testing.T) {
					prompts := make([][]int, len(sc.prompts))
					for i, n := range sc.prompts {
						prompts[i] = promptOf(i, n, m.Config().VocabSize)
					}
					runSchedule(t, m, prompts, sc.kvBits, sc.steps)
				})
			}
		})
	}
}

// fuzzBytes reads a fuzz input a byte at a time, zeros once it runs out.
type fuzzBytes []byte

func (b *fuzzBytes) next() int {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return int(v)
}

// FuzzForwardBatch draws the model, the number of sequences (1–5), their
// prompts (1–6 tokens) and KV widths, and 1–4 steps of batches (members,
// order, sequences stepped alone before, nil logits) from the input, and
// checks every sequence stays bitwise its twin stepped alone.
func FuzzForwardBatch(f *testing.F) {
	var models []*Model
	for _, bm := range batchModels() {
		switch bm.name {
		case "moe-fused", "moe-groups-3-threads", "dense-2-threads":
			models = append(models, bm.open(f))
		}
	}
	f.Add([]byte{0, 2, 3, 1, 2, 9, 9, 5, 1, 2, 3, 0, 1})
	f.Add([]byte{1, 4, 1, 4, 2, 6, 7, 8, 9, 10, 11, 12, 13, 3, 0xff, 1, 2, 3, 0, 0x0f, 2, 0, 1})
	f.Add([]byte{2, 0, 5, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		m := models[in.next()%len(models)]
		V := m.Config().VocabSize
		N := 1 + in.next()%5
		prompts := make([][]int, N)
		for i := range prompts {
			prompts[i] = make([]int, 1+in.next()%6)
			for j := range prompts[i] {
				prompts[i][j] = (in.next()<<8 | in.next()) % V
			}
		}
		kvBits := []int{[]int{KVFloat32, KVBF16, KVInt8}[in.next()%3]}
		steps := make([]batchStep, 1+in.next()%4)
		for s := range steps {
			members, alone := in.next(), in.next()
			var batch []int
			for i := range N {
				if members>>i&1 == 1 {
					batch = append(batch, i)
				}
				if alone>>i&1 == 1 {
					steps[s].alone = append(steps[s].alone, i)
				}
			}
			if len(batch) == 0 {
				batch = []int{members % N}
			}
			for i := len(batch) - 1; i > 0; i-- { // Fisher–Yates from the input
				j := in.next() % (i + 1)
				batch[i], batch[j] = batch[j], batch[i]
			}
			steps[s].batch = batch
			steps[s].noLogits = alone>>7&1 == 1
		}
		runSchedule(t, m, prompts, kvBits, steps)
	})
}

// fixedRoute routes every token to experts 0 … k−1.
type fixedRoute struct{ k int }

func (r fixedRoute) Experts(pos, layer int, dst []int) ([]int, error) {
	for e := range r.k {
		dst = append(dst, e)
	}
	return dst, nil
}

// TestForwardBatchRefuses: each bad argument is refused with an error
// naming it, and no state of the batch changes.
func TestForwardBatchRefuses(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	other, _ := fixtureModels[0].open(t, nil)
	V := m.Config().VocabSize
	prefilled := func(opts StateOptions) *State {
		st := m.NewState(opts)
		if err := m.Forward(st, []int{1, 2, 3}, nil, false); err != nil {
			t.Fatal(err)
		}
		return st
	}
	a, b := prefilled(StateOptions{}), prefilled(StateOptions{})
	full := prefilled(StateOptions{MaxContext: 3})
	failed := prefilled(StateOptions{})
	failed.failed = errors.New("disk on fire")
	overridden := prefilled(StateOptions{})
	overridden.SetRouteOverride(fixedRoute{k: m.Config().ExpertsPerToken})
	foreign := other.NewState(StateOptions{})
	for _, tc := range []struct {
		name   string
		states []*State
		ids    []int
		logits []float32
		want   string
	}{
		{"no states", nil, nil, nil, "no states"},
		{"fewer tokens", []*State{a, b}, []int{1}, nil, "2 states but 1 tokens"},
		{"more tokens", []*State{a}, []int{1, 2}, nil, "1 states but 2 tokens"},
		{"short logits", []*State{a, b}, []int{1, 2}, make([]float32, V), "want 2 states × vocab"},
		{"long logits", []*State{a}, []int{1}, make([]float32, V+1), "want 1 states × vocab"},
		{"nil state", []*State{a, nil}, []int{1, 2}, nil, "state 1 was not made by this model"},
		{"foreign state", []*State{foreign, a}, []int{1, 2}, nil, "state 0 was not made by this model"},
		{"duplicate", []*State{a, b, a}, []int{1, 2, 3}, nil, "state 2 is also state 0"},
		{"failed state", []*State{a, failed}, []int{1, 2}, nil, "state 1 is inconsistent after an earlier failure (disk on fire)"},
		{"replaying beside the router", []*State{overridden, a}, []int{1, 2}, nil, "state 0 replays routing (SetRouteOverride) and state 1 is routed by the router"},
		{"the router beside replaying", []*State{a, b, overridden}, []int{1, 2, 3}, nil, "state 2 replays routing (SetRouteOverride) and state 0 is routed by the router"},
		{"negative token", []*State{a, b}, []int{1, -1}, nil, "token -1 of state 1 is outside the vocabulary"},
		{"token past vocab", []*State{a, b}, []int{V, 1}, nil, fmt.Sprintf("token %d of state 0 is outside the vocabulary", V)},
		{"at max context", []*State{a, full}, []int{1, 2}, nil, "state 1 holds 3 tokens, its max context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]*State, len(tc.states))
			for i, st := range tc.states {
				if st != nil && st.model == m {
					before[i] = st.Clone()
				}
			}
			err := m.ForwardBatch(tc.states, tc.ids, tc.logits)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			for i, st := range tc.states {
				if before[i] != nil {
					assertSameState(t, st, before[i])
					if (st.failed == nil) != (before[i].failed == nil) {
						t.Errorf("state %d: failed %v, before %v", i, st.failed, before[i].failed)
					}
				}
			}
		})
	}
}

// TestForwardBatchFailurePoisonsEveryState: an expert read failing in the
// middle of a batched step is reported and leaves every state of the batch
// refusing work until Reset, as Forward leaves its one state.
func TestForwardBatchFailurePoisonsEveryState(t *testing.T) {
	dir := filepath.Join(fixturesDir(t), "tiny-moe-fused")
	sw := loadSnapshot(t, dir)
	fe := &failingExperts{Experts: sw, failAt: -1}
	m, err := New(fixtureConfig(t, dir), sw, fe, nil)
	if err != nil {
		t.Fatal(err)
	}
	states := []*State{m.NewState(StateOptions{}), m.NewState(StateOptions{}), m.NewState(StateOptions{})}
	for i, st := range states {
		if err := m.Forward(st, promptOf(i, 2+i, m.Config().VocabSize), nil, false); err != nil {
			t.Fatal(err)
		}
	}
	bystander := states[2]
	fe.failAt = fe.calls + 3 // the third MoE layer of the batch
	err = m.ForwardBatch(states[:2], []int{7, 8}, nil)
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("error %v, want the expert read's", err)
	}
	for i, st := range states[:2] {
		if err := m.Forward(st, []int{1}, nil, false); err == nil || !strings.Contains(err.Error(), "Reset") {
			t.Errorf("state %d accepted work after the failed batch: %v", i, err)
		}
	}
	if err := m.ForwardBatch(states, []int{1, 2, 3}, nil); err == nil || !strings.Contains(err.Error(), "state 0 is inconsistent") {
		t.Errorf("a batch with failed states: %v", err)
	}
	if err := m.Forward(bystander, []int{1}, nil, false); err != nil {
		t.Errorf("a state outside the failed batch: %v", err)
	}
	for _, st := range states[:2] {
		st.Reset()
	}
	if err := m.ForwardBatch(states, []int{1, 2, 3}, nil); err != nil {
		t.Errorf("after Reset: %v", err)
	}
}

// TestForwardBatchConcurrentBatches: two goroutines stepping disjoint
// batches on one model take turns on its batch scratch (run it under
// -race) and still match their twins stepped alone.
func TestForwardBatchConcurrentBatches(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	V := m.Config().VocabSize
	const steps = 4
	type group struct{ batched, alone []*State }
	groups := make([]group, 2)
	for g := range groups {
		for i := range 2 {
			p := promptOf(2*g+i, 3+i, V)
			for _, dst := range []*[]*State{&groups[g].batched, &groups[g].alone} {
				st := m.NewState(StateOptions{})
				if err := m.Forward(st, p, nil, false); err != nil {
					t.Fatal(err)
				}
				*dst = append(*dst, st)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range steps {
				if err := m.ForwardBatch(groups[g].batched, []int{s + 1, s + 2}, nil); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for g := range groups {
		if errs[g] != nil {
			t.Fatal(errs[g])
		}
		for i, st := range groups[g].alone {
			for s := range steps {
				if err := m.Forward(st, []int{s + 1 + i}, nil, false); err != nil {
					t.Fatal(err)
				}
			}
			assertSameState(t, groups[g].batched[i], st)
		}
	}
}

// tapRecord is what a Tap saw, as bits.
type tapRecord struct {
	point       TapPoint
	layer, pos  int
	hiddenState []uint32
}

// TestForwardBatchTaps: a state's Tap sees, during a batched step, its own
// row of every hidden state, bitwise what it sees when stepped alone, and
// a state without a tap changes nothing.
func TestForwardBatchTaps(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	V := m.Config().VocabSize
	var batched, alone [3]*State
	var seen [2][3][]tapRecord
	for i := range batched {
		p := promptOf(i, 2+3*i, V)
		for w, st := range []**State{&batched[i], &alone[i]} {
			*st = m.NewState(StateOptions{})
			if err := m.Forward(*st, p, nil, false); err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				continue // a state without a tap
			}
			(*st).SetTap(func(point TapPoint, layer, pos int, hidden []float32) {
				seen[w][i] = append(seen[w][i], tapRecord{point, layer, pos, bits(hidden)})
			})
		}
	}
	for _, withLogits := range []bool{false, true} {
		var logits []float32
		if withLogits {
			logits = make([]float32, 3*V)
		}
		ids := []int{5, 6, 7}
		if err := m.ForwardBatch(batched[:], ids, logits); err != nil {
			t.Fatal(err)
		}
		for i, st := range alone {
			var row []float32
			if withLogits {
				row = make([]float32, V)
			}
			if err := m.Forward(st, ids[i:i+1], row, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, i := range []int{0, 2} {
		got, want := seen[0][i], seen[1][i]
		if len(got) != len(want) || len(want) != 2*(len(m.layers)+2) {
			t.Fatalf("state %d: %d taps batched, %d alone; want %d", i, len(got), len(want), 2*(len(m.layers)+2))
		}
		for j := range want {
			g, w := got[j], want[j]
			if g.point != w.point || g.layer != w.layer || g.pos != w.pos || !slices.Equal(g.hiddenState, w.hiddenState) {
				t.Fatalf("state %d: tap %d saw point %d layer %d position %d (%d values), alone point %d layer %d position %d (%d values), or other bits",
					i, j, g.point, g.layer, g.pos, len(g.hiddenState), w.point, w.layer, w.pos, len(w.hiddenState))
			}
		}
	}
	for i := range batched {
		assertSameState(t, batched[i], alone[i])
	}
}

// TestForwardBatchMixerPaths reaches the batched mixers' paths the
// schedules above do not: the long-context split of attention (forced on)
// for rows past the first of the batch's projections, on several threads,
// and a batch of more than mixRows states, whose mixers run in pieces.
func TestForwardBatchMixerPaths(t *testing.T) {
	models := map[string]batchModel{}
	for _, bm := range batchModels() {
		models[bm.name] = bm
	}
	t.Run("split attention", func(t *testing.T) {
		defer func(v bool) { splitAttentionAlways = v }(splitAttentionAlways)
		splitAttentionAlways = true
		for _, name := range []string{"moe-groups-3-threads", "dense-2-threads"} {
			t.Run(name, func(t *testing.T) {
				m := models[name].open(t)
				prompts := [][]int{promptOf(0, 3, m.Config().VocabSize), promptOf(1, 6, m.Config().VocabSize), promptOf(2, 1, m.Config().VocabSize)}
				runSchedule(t, m, prompts, []int{KVInt8, KVFloat32, KVBF16}, []batchStep{
					{batch: []int{2, 0, 1}}, {alone: []int{1}, batch: []int{0, 1, 2}}, {batch: []int{1, 2}},
				})
			})
		}
	})
	t.Run("more than mixRows states", func(t *testing.T) {
		m := models["moe-groups-3-threads"].open(t)
		N := mixRows + 3
		prompts := make([][]int, N)
		all, reversed := make([]int, N), make([]int, N)
		for i := range prompts {
			prompts[i] = promptOf(i, 1+i%3, m.Config().VocabSize)
			all[i], reversed[N-1-i] = i, i
		}
		runSchedule(t, m, prompts, []int{KVFloat32, KVInt8}, []batchStep{{batch: all}, {batch: reversed}})
	})
}

// offsetRoutes replays src from position first on: a shared source that
// each sequence reads from its own offset.
type offsetRoutes struct {
	src   model.RouteOverride
	first int
}

func (o offsetRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	return o.src.Experts(o.first+pos, layer, dst)
}

// TestForwardBatchReplaysEachStatesRouting: states replaying routing (each
// its own synthetic agent source, or one shared trace read from an offset
// per sequence) get, in batches that join, leave and reorder, bitwise the
// logits and state each gets stepped alone under the same replay.
func TestForwardBatchReplaysEachStatesRouting(t *testing.T) {
	steps := []batchStep{
		{batch: []int{0, 1}}, {batch: []int{2, 0, 1}}, {alone: []int{0}, batch: []int{1, 2, 3}},
		{batch: []int{3, 2, 1, 0}}, {batch: []int{0}}, {batch: []int{0, 2, 1, 3}, noLogits: true}, {batch: []int{1, 3, 0, 2}},
	}
	for _, bm := range batchModels() {
		if strings.HasPrefix(bm.name, "dense") {
			continue // no routed experts
		}
		t.Run(bm.name, func(t *testing.T) {
			m := bm.open(t)
			c := m.Config()
			geom := routing.Geometry{Layers: len(c.Layers), Experts: c.NumExperts, TopK: c.ExpertsPerToken}
			prompts := make([][]int, 4)
			for i := range prompts {
				prompts[i] = promptOf(i, 2+3*i, c.VocabSize)
			}
			shared, err := routing.Generate(geom, routing.Agent, 64, 7)
			if err != nil {
				t.Fatal(err)
			}
			trace := routing.NewTraceSource(shared, "test", false)
			// The replay changes the logits, so a batch's rows equal to
			// their replaying twins' means the batch replayed them.
			replayed, routed := m.NewState(StateOptions{}), m.NewState(StateOptions{})
			replayed.SetRouteOverride(offsetRoutes{src: trace})
			a, b := make([]float32, c.VocabSize), make([]float32, c.VocabSize)
			if err := m.Forward(replayed, prompts[3], a, false); err != nil {
				t.Fatal(err)
			}
			if err := m.Forward(routed, prompts[3], b, false); err != nil {
				t.Fatal(err)
			}
			if bitwiseDiff(a, b) < 0 {
				t.Fatal("the replayed routing gives the router's logits: the test cannot tell them apart")
			}
			for _, tc := range []struct {
				name   string
				routes func(i int) model.RouteOverride
			}{
				{"own synthetic source each", func(i int) model.RouteOverride {
					src, err := routing.NewSynthetic(geom, routing.Spec{Regime: routing.Agent, Seed: uint64(1 + i)})
					if err != nil {
						t.Fatal(err)
					}
					return src
				}},
				{"one trace, an offset each", func(i int) model.RouteOverride { return offsetRoutes{src: trace, first: 16 * i} }},
			} {
				t.Run(tc.name, func(t *testing.T) {
					runRoutedSchedule(t, m, prompts, []int{KVInt8, KVFloat32}, steps, tc.routes)
				})
			}
		})
	}
}
