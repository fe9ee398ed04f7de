package gpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// stubState is a model.State of no GPU model.
type stubState struct{ model.State }

// StepBatch refuses every bad argument before any state changes, naming
// the state (host only: no device is touched).
func TestStepBatchRefusesBadArguments(t *testing.T) {
	m := &Model{geom: geometry{V: 10}}
	other := &Model{geom: geometry{V: 10}}
	b := &Backend{Model: m}
	mk := func(pos int) *State {
		return &State{m: m, pos: pos, maxCtx: 8, kcap: 8, allocs: []cuda.DevicePtr{1}}
	}
	for _, tc := range []struct {
		name   string
		states func() []model.State
		ids    []int
		logits []float32
		err    string
	}{
		{name: "no states", states: func() []model.State { return nil }, err: "gpu: StepBatch: no states"},
		{name: "tokens", states: func() []model.State { return []model.State{mk(0), mk(0)} }, ids: []int{1},
			err: "2 states but 1 tokens; give each state exactly one token"},
		{name: "logits", states: func() []model.State { return []model.State{mk(0)} }, ids: []int{1}, logits: make([]float32, 9),
			err: "logits has 9 values, want 1 states × vocab 10 = 10"},
		{name: "another engine's", states: func() []model.State { return []model.State{mk(0), stubState{}} }, ids: []int{1, 2},
			err: "state 1 (gpu.stubState) was not made by this model's NewState"},
		{name: "another model's", states: func() []model.State { return []model.State{&State{m: other, allocs: []cuda.DevicePtr{1}, maxCtx: 8}} }, ids: []int{1},
			err: "state 0 (*gpu.State) was not made by this model's NewState"},
		{name: "nil", states: func() []model.State { return []model.State{(*State)(nil)} }, ids: []int{1},
			err: "state 0 (*gpu.State) was not made by this model's NewState"},
		{name: "closed", states: func() []model.State {
			st := mk(0)
			st.allocs = nil
			return []model.State{mk(0), st}
		}, ids: []int{1, 2}, err: "state 1 is closed"},
		{name: "failed", states: func() []model.State {
			st := mk(0)
			st.failed = fmt.Errorf("boom")
			return []model.State{st}
		}, ids: []int{1}, err: "state 0 failed earlier (boom)"},
		{name: "vocabulary", states: func() []model.State { return []model.State{mk(0), mk(0)} }, ids: []int{1, 10},
			err: "token 10 of state 1 is outside the vocabulary [0, 10)"},
		{name: "negative token", states: func() []model.State { return []model.State{mk(0)} }, ids: []int{-1},
			err: "token -1 of state 0 is outside the vocabulary"},
		{name: "full", states: func() []model.State { return []model.State{mk(3), mk(8)} }, ids: []int{1, 2},
			err: "state 1 holds 8 tokens, its max context"},
		{name: "twice", states: func() []model.State {
			st := mk(0)
			return []model.State{mk(0), st, mk(1), st}
		}, ids: []int{1, 2, 3, 4}, err: "state 3 is also state 1; a state takes one token per step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := tc.states()
			before := make([]int, len(states))
			for i, s := range states {
				if st, ok := s.(*State); ok && st != nil {
					before[i] = st.pos
				}
			}
			err := b.StepBatch(states, tc.ids, tc.logits)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			for i, s := range states {
				if st, ok := s.(*State); ok && st != nil && (st.pos != before[i] || (tc.name != "failed" && st.failed != nil)) {
					t.Errorf("state %d changed: pos %d (was %d), failed %v", i, st.pos, before[i], st.failed)
				}
			}
		})
	}
}

// batchSeq is one sequence of an interleaving: its prompt is fed alone at
// global step join, then one token a step for steps steps, in batches.
type batchSeq struct {
	prompt      []int
	join, steps int
	kvBits      int
	sampling    *sample.Params // nil: greedy
	replay      bool           // a routing override (route_test.go's fixedRoutes)
}

// seqRun is a sequence's state and sampler while it runs.
type seqRun struct {
	st      *State
	sampler *sample.Sampler
	next    int // the token to feed
}

// batchReplay routes position pos at layer to k consecutive experts from a
// base that moves with both.
func batchReplay(E, k int) fixedRoutes {
	return func(pos, layer int) ([]int, error) {
		ids := make([]int, k)
		for j := range ids {
			ids[j] = (pos*5 + layer*3 + j) % E
		}
		return ids, nil
	}
}

func startSeq(t *testing.T, b *Backend, q batchSeq) *seqRun {
	t.Helper()
	st, err := b.Model.NewState(StateOptions{KVInitial: 16, KVBits: q.kvBits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close) // once: a State is closed once
	if q.replay {
		st.SetRouteOverride(batchReplay(b.Model.geom.E, b.Model.geom.k))
	}
	r := &seqRun{st: st}
	if q.sampling != nil {
		if r.sampler, err = sample.New(*q.sampling); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Forward(q.prompt); err != nil {
		t.Fatal(err)
	}
	r.next = r.pick(t)
	return r
}

// pick chooses the next token from the state's last logits: greedy on the
// device, or sampled on the device (the host's reference where the device
// hands the row back).
func (r *seqRun) pick(t *testing.T) int {
	t.Helper()
	if r.sampler == nil {
		id, err := r.st.Argmax()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ns := r.sampler.Next()
	id, ok, err := r.st.Sample(ns, r.sampler.History())
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		row := make([]float32, r.st.m.geom.V)
		if err := r.st.Logits(row); err != nil {
			t.Fatal(err)
		}
		if id, err = sample.Reference(ns, r.sampler.History(), row); err != nil {
			t.Fatal(err)
		}
	}
	r.sampler.Accept(id)
	return id
}

// aloneRun is what a sequence gives run alone: the logits after each decode
// step and the token fed at each.
type aloneRun struct {
	logits [][]float32
	fed    []int
}

func runAlone(t *testing.T, b *Backend, q batchSeq) aloneRun {
	t.Helper()
	r := startSeq(t, b, q)
	var out aloneRun
	for range q.steps {
		out.fed = append(out.fed, r.next)
		if err := r.st.Forward([]int{r.next}); err != nil {
			t.Fatal(err)
		}
		row := make([]float32, b.Model.geom.V)
		if err := r.st.Logits(row); err != nil {
			t.Fatal(err)
		}
		out.logits = append(out.logits, row)
		r.next = r.pick(t)
	}
	return out
}

// interleaving is a schedule of sequences stepped together: at each global
// step the running sequences are shuffled and cut into subsets (one
// StepBatch each) by split.
type interleaving struct {
	name  string
	seqs  []batchSeq
	split func(r *rand.Rand, n int) []int // subset sizes summing to n
}

func allInOne(_ *rand.Rand, n int) []int { return []int{n} }

func randomSubsets(r *rand.Rand, n int) []int {
	var sizes []int
	for n > 0 {
		k := 1 + r.IntN(n)
		sizes = append(sizes, k)
		n -= k
	}
	return sizes
}

func promptOf(n, seed, V int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 1 + (seed*131+i*37)%(V-1)
	}
	return ids
}

func interleavings(V int) []interleaving {
	p := func(i int) *sample.Params { return &sampleParams[i] }
	seqs := func(n, steps int) []batchSeq {
		out := make([]batchSeq, n)
		for i := range out {
			out[i] = batchSeq{prompt: promptOf(1+i%5, i, V), steps: steps, kvBits: []int{32, 16, 8}[i%3]}
		}
		return out
	}
	eighteen := seqs(18, 4)
	return []interleaving{
		{name: "staggered joins, shuffled", split: allInOne, seqs: []batchSeq{
			{prompt: promptOf(7, 1, V), join: 0, steps: 30, kvBits: 32},
			{prompt: promptOf(3, 2, V), join: 0, steps: 24, kvBits: 8, sampling: p(0)},
			{prompt: promptOf(12, 3, V), join: 4, steps: 20, kvBits: 16},
			{prompt: promptOf(1, 4, V), join: 9, steps: 25, kvBits: 8, sampling: p(3)},
		}},
		{name: "random subsets", split: randomSubsets, seqs: []batchSeq{
			{prompt: promptOf(5, 5, V), join: 0, steps: 26, kvBits: 8},
			{prompt: promptOf(9, 6, V), join: 1, steps: 22, kvBits: 8, sampling: p(1)},
			{prompt: promptOf(2, 7, V), join: 2, steps: 18, kvBits: 32, sampling: p(2)},
			{prompt: promptOf(17, 8, V), join: 2, steps: 30, kvBits: 16},
			{prompt: promptOf(4, 9, V), join: 6, steps: 12, kvBits: 8, sampling: p(8)},
			{prompt: promptOf(6, 10, V), join: 11, steps: 16, kvBits: 32},
		}},
		{name: "routing replay beside the router", split: randomSubsets, seqs: []batchSeq{
			{prompt: promptOf(6, 11, V), join: 0, steps: 22, kvBits: 8, replay: true},
			{prompt: promptOf(3, 12, V), join: 0, steps: 22, kvBits: 8},
			{prompt: promptOf(8, 13, V), join: 3, steps: 20, kvBits: 32, replay: true, sampling: p(0)},
			{prompt: promptOf(2, 14, V), join: 5, steps: 18, kvBits: 16},
		}},
		{name: "routing replay on every row", split: randomSubsets, seqs: []batchSeq{
			{prompt: promptOf(5, 22, V), join: 0, steps: 20, kvBits: 8, replay: true},
			{prompt: promptOf(2, 23, V), join: 0, steps: 24, kvBits: 8, replay: true, sampling: p(2)},
			{prompt: promptOf(9, 24, V), join: 4, steps: 16, kvBits: 32, replay: true},
		}},
		{name: "every cache int8 (attention in one launch)", split: randomSubsets, seqs: []batchSeq{
			{prompt: promptOf(4, 15, V), join: 0, steps: 24, kvBits: 8},
			{prompt: promptOf(10, 16, V), join: 0, steps: 20, kvBits: 8, sampling: p(0)},
			{prompt: promptOf(2, 17, V), join: 3, steps: 22, kvBits: 8, replay: true},
			{prompt: promptOf(7, 18, V), join: 8, steps: 12, kvBits: 8},
		}},
		{name: "every cache bfloat16", split: allInOne, seqs: []batchSeq{
			{prompt: promptOf(3, 19, V), join: 0, steps: 20, kvBits: 16},
			{prompt: promptOf(9, 20, V), join: 2, steps: 20, kvBits: 16, sampling: p(3)},
			{prompt: promptOf(5, 21, V), join: 2, steps: 14, kvBits: 16},
		}},
		{name: "more than MaxBatch", split: allInOne, seqs: eighteen},
	}
}

// runInterleaving steps il's sequences in batches and checks every row of
// logits (StepBatch's and each state's own) and every token against the
// sequence run alone.
func runInterleaving(t *testing.T, b *Backend, il interleaving, seed uint64) {
	t.Helper()
	want := make([]aloneRun, len(il.seqs))
	for i, q := range il.seqs {
		want[i] = runAlone(t, b, q)
	}
	V := b.Model.geom.V
	runs := make([]*seqRun, len(il.seqs))
	done := make([]int, len(il.seqs)) // decode steps taken
	rng := rand.New(rand.NewPCG(seed, 7))
	for step := 0; ; step++ {
		var active []int
		finished := true
		for i, q := range il.seqs {
			if q.join == step {
				runs[i] = startSeq(t, b, q)
			}
			if runs[i] != nil && done[i] < q.steps {
				active = append(active, i)
			}
			finished = finished && runs[i] != nil && done[i] == q.steps
		}
		if finished {
			break
		}
		rng.Shuffle(len(active), func(a, b int) { active[a], active[b] = active[b], active[a] })
		for _, n := range il.split(rng, len(active)) {
			subset := active[:n]
			active = active[n:]
			states := make([]model.State, n)
			ids := make([]int, n)
			for j, i := range subset {
				states[j], ids[j] = runs[i].st, runs[i].next
				if w := want[i].fed[done[i]]; ids[j] != w {
					t.Fatalf("step %d: sequence %d feeds token %d, alone it fed %d", step, i, ids[j], w)
				}
			}
			logits := make([]float32, n*V)
			if err := b.StepBatch(states, ids, logits); err != nil {
				t.Fatalf("step %d, batch %v: %v", step, subset, err)
			}
			row := make([]float32, V)
			for j, i := range subset {
				w := want[i].logits[done[i]]
				if !bitsEqual(logits[j*V:(j+1)*V], w) {
					t.Fatalf("step %d: sequence %d (row %d of %d, decode step %d): StepBatch's logits are not bitwise its own Forward's", step, i, j, n, done[i])
				}
				if err := runs[i].st.Logits(row); err != nil {
					t.Fatal(err)
				}
				if !bitsEqual(row, w) {
					t.Fatalf("step %d: sequence %d: the state's logits after StepBatch are not bitwise its own Forward's", step, i)
				}
				done[i]++
				runs[i].next = runs[i].pick(t)
			}
		}
	}
	for i, r := range runs {
		if r.st.Len() != len(il.seqs[i].prompt)+il.seqs[i].steps {
			t.Errorf("sequence %d holds %d tokens, want %d", i, r.st.Len(), len(il.seqs[i].prompt)+il.seqs[i].steps)
		}
	}
}

// The batched step is bitwise each sequence alone: tiny-moe at 4, 8 and
// 16 bits, resident, streamed (4 slots a layer: a batch of more than one
// row stages its experts; 12: up to 3 rows resolve to slots, and staged
// throughout with NVMAI_GPU_BATCH_STAGE=1), with
// the batch graphs off, with the mixers launched row by row
// (NVMAI_GPU_BATCH_ROWS=0), without the fused decode launches
// (NVMAI_GPU_FUSE=0) and through the host plan; KV widths mixed within a
// batch and uniform, greedy and seeded sampling, a routing replay on some
// states and on all, joins at different steps, shuffled rows and random
// subsets, and more states than MaxBatch.
func TestStepBatchIsBitwiseAlone(t *testing.T) {
	needGPU(t)
	for _, tc := range []struct {
		bits, slots  int
		graphs, rows bool // rows: the mixers launched row by row
		hostPlanned  bool // streamed through the host plan: the states step one by one
		unfused      bool // NVMAI_GPU_FUSE=0: qgemv over the rows, no mgemv or moe_down
		stage        bool // NVMAI_GPU_BATCH_STAGE=1: streamed batches staged, never resolved to slots
	}{
		{bits: 4, graphs: true}, {bits: 8, graphs: true}, {bits: 16, graphs: true},
		{bits: 4, slots: 4, graphs: true}, {bits: 8, slots: 4, graphs: true},
		{bits: 4, graphs: false}, {bits: 4, graphs: true, rows: true}, {bits: 16, graphs: false, rows: true},
		{bits: 4, slots: 4, hostPlanned: true},
		{bits: 4, graphs: true, unfused: true}, {bits: 8, slots: 4, graphs: true, unfused: true},
		{bits: 4, slots: 12, graphs: true}, {bits: 8, slots: 12, graphs: false, stage: true},
	} {
		name := fmt.Sprintf("%d-bit slots %d graphs %v row launches %v host-planned %v unfused %v staged %v", tc.bits, tc.slots, tc.graphs, tc.rows, tc.hostPlanned, tc.unfused, tc.stage)
		t.Run(name, func(t *testing.T) {
			dir := install(t, "tiny-moe-fused", tc.bits)
			t.Setenv("NVMAI_GPU_BATCH_GRAPH", map[bool]string{true: "", false: "0"}[tc.graphs])
			t.Setenv("NVMAI_GPU_BATCH_ROWS", map[bool]string{true: "0", false: ""}[tc.rows])
			t.Setenv("NVMAI_GPU_HOST_PLANNED", map[bool]string{true: "1", false: ""}[tc.hostPlanned])
			t.Setenv("NVMAI_GPU_FUSE", map[bool]string{true: "0", false: ""}[tc.unfused])
			t.Setenv("NVMAI_GPU_BATCH_STAGE", map[bool]string{true: "1", false: ""}[tc.stage])
			e := loadGPUWith(t, dir, tc.slots, 0)
			defer e.Close()
			if !e.CanBatch() {
				t.Fatal("the GPU engine reports no batched step")
			}
			b := e.Model().(*Backend)
			if streamed := b.Model.stream != nil; streamed != (tc.slots > 0) || b.Model.hostPlanned() != tc.hostPlanned {
				t.Fatalf("streamed %v host-planned %v, want %v %v", streamed, b.Model.hostPlanned(), tc.slots > 0, tc.hostPlanned)
			}
			for i, il := range interleavings(b.Model.geom.V) {
				t.Run(il.name, func(t *testing.T) { runInterleaving(t, b, il, uint64(i+1)) })
			}
			graphs, kernels := b.Model.BatchGraphs()
			t.Logf("FIDELITY batched step %s: every interleaving bitwise alone; %d batch graphs held, the last of %d kernels", name, graphs, kernels)
			if want := tc.graphs && !tc.hostPlanned; want != (graphs > 0) {
				t.Errorf("%d batch graphs held, want some %v", graphs, want)
			}
		})
	}
}

// The engine the runtime loads for --engine gpu is a model.BatchStepper
// (so Engine.CanBatch and serve --parallel batch it), and sessions stepped
// together through it decode the greedy tokens of their own Generate.
func TestGPUEngineBatchesGreedyLikeGenerate(t *testing.T) {
	needGPU(t)
	e := loadEngine(t, install(t, "tiny-moe-fused", 4), true)
	if !e.CanBatch() {
		t.Fatal("CanBatch is false for the GPU engine")
	}
	V := e.Install.Manifest.Geometry.VocabSize
	prompts := [][]int{promptOf(5, 1, V), promptOf(2, 2, V), promptOf(11, 3, V)}
	const n = 20
	got := batchedGreedy(t, e, prompts, n)
	for i, p := range prompts {
		if want := greedy(t, e, p, n); !slices.Equal(got[i], want) {
			t.Errorf("prompt %d: batched %v, alone %v", i, got[i], want)
		}
	}
}

// batchedGreedy decodes n greedy tokens for each prompt, the sessions
// stepped together through Engine.StepBatch.
func batchedGreedy(t *testing.T, e *runtime.Engine, prompts [][]int, n int) [][]int {
	t.Helper()
	out := make([][]int, len(prompts))
	states := make([]model.State, len(prompts))
	next := make([]int, len(prompts))
	for i, p := range prompts {
		st, err := e.Model().NewState(model.StateOptions{KVInitial: 16, KVBits: 32})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Forward(p); err != nil {
			t.Fatal(err)
		}
		if next[i], err = st.Argmax(); err != nil {
			t.Fatal(err)
		}
		states[i] = st
	}
	bs := e.Model().(model.BatchStepper)
	for range n {
		for i := range prompts {
			out[i] = append(out[i], next[i])
		}
		if err := bs.StepBatch(states, next, nil); err != nil {
			t.Fatal(err)
		}
		for i, st := range states {
			id, err := st.Argmax()
			if err != nil {
				t.Fatal(err)
			}
			next[i] = id
		}
	}
	return out
}

// TestBatchStepRate times the device batched step on each install named by
// NVMAI_GPU_BATCH_BENCH (comma-separated; e.g. the 40-layer 4-bit
// synthetic): N = 1, 2, 4, 8 and 16 sequences (16-token prompts, int8 KV
// as serve runs them; routing replayed when NVMAI_GPU_BATCH_BENCH_ROUTING
// names a synthetic regime without a seed, such as synthetic:agent: sequence i takes seed
// i+1) stepped together for
// 64 steps, each step followed by every sequence's Argmax as the runtime
// reads it; and one sequence stepped alone with Forward. It prints BATCH
// lines: ms a step, aggregate tok/s, each sequence's rate, and the
// aggregate against the lone sequence's (issue #39's GPU acceptance is
// ≥ 3× at N = 4 on an H200 through the server, each stream ≥ 0.5×).
func TestBatchStepRate(t *testing.T) {
	needGPU(t)
	for _, dir := range envDirs(t, "NVMAI_GPU_BATCH_BENCH", "install to time the batched step on") {
		e := loadEngine(t, dir, true)
		b := e.Model().(*Backend)
		spec := os.Getenv("NVMAI_GPU_BATCH_BENCH_ROUTING")
		const steps = 64
		V := b.Model.geom.V
		newSeqs := func(n int) []*State {
			sts := make([]*State, n)
			for i := range sts {
				st, err := b.Model.NewState(StateOptions{KVInitial: 256, KVBits: model.KVInt8})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(st.Close)
				if spec != "" { // each sequence its own seed, as serve --routing gives each slot
					st.SetRouteOverride(synthSource(t, e, fmt.Sprintf("%s:seed=%d", spec, 1+i)))
				}
				if err := st.Forward(promptOf(16, i, V)); err != nil {
					t.Fatal(err)
				}
				sts[i] = st
			}
			return sts
		}
		alone := newSeqs(1)[0]
		next := []int{1}
		start := time.Now()
		for range steps {
			if err := alone.Forward(next); err != nil {
				t.Fatal(err)
			}
			id, err := alone.Argmax()
			if err != nil {
				t.Fatal(err)
			}
			next[0] = id
		}
		aloneRate := steps / time.Since(start).Seconds()
		t.Logf("BATCH %s: one sequence alone %.1f tok/s (%.3f ms a step)", filepath.Base(dir), aloneRate, 1e3/aloneRate)
		for _, n := range []int{1, 2, 4, 8, 16} {
			sts := newSeqs(n)
			states := make([]model.State, n)
			ids := make([]int, n)
			for i, st := range sts {
				states[i], ids[i] = st, 1
			}
			step := func() {
				if err := b.StepBatch(states, ids, nil); err != nil {
					t.Fatal(err)
				}
				for i, st := range sts {
					id, err := st.Argmax()
					if err != nil {
						t.Fatal(err)
					}
					ids[i] = id
				}
			}
			step() // captures the batch graph
			start := time.Now()
			for range steps {
				step()
			}
			sec := time.Since(start).Seconds()
			agg := float64(n*steps) / sec
			t.Logf("BATCH %s: N %2d: %.3f ms a step, %.1f tok/s in all, %.1f tok/s each; aggregate %.2f× one sequence alone, each %.2f×",
				filepath.Base(dir), n, 1e3*sec/steps, agg, agg/float64(n), agg/aloneRate, agg/float64(n)/aloneRate)
		}
	}
}
