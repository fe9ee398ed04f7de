package qwen35

import (
	"fmt"
	"math"
	"slices"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// ffnScratch holds the per-chunk buffers of the MoE block and dense MLP.
type ffnScratch struct {
	gate, up   []float32     // [T, I]
	sharedG    []float32     // shared expert gate, then swiglu [T, Is]
	sharedU    []float32     // shared expert up [T, Is]
	router     []float32     // router logits [T, E]
	sel        []int         // selected experts per token, ascending [T, k]
	weight     []float32     // their renormalised weights [T, k]
	probs      []float32     // one token's softmax [E]
	users      [][]tokenSlot // per expert: the (token, slot) pairs routed to it
	ids        []int         // distinct experts of the chunk, ascending
	visited    []bool        // per index of ids: handed over by Visit
	xs, ys     []float32     // gathered inputs [n, H] and outputs [n, H] of one expert
	routed     []float32     // every routed expert output [T, k, H], weighted later
	sharedGate []float32     // [T]

	// runExpertGroup's scratch: gate, up and down outputs of the group's
	// experts back to back, and the job's operand lists.
	groupGate, groupUp, groupY []float32
	groupDsts, groupIns        [][]float32
	groupMats                  []*kernels.Matrix

	shared   pendingProduct // the shared expert's down product, until it has run
	combined []float32      // one token's combined expert output [H]
	sigma    [1]float32     // one token's shared-expert gate
	prof     *StepProfile
}

// pendingProduct is a single-token dst = m·x that may join another job.
type pendingProduct struct {
	dst []float32
	m   *kernels.Matrix
	x   []float32
}

type tokenSlot struct{ token, slot int }

// denseMLP is y = W_down · (silu(W_gate x) ⊙ (W_up x)) for T rows.
func (m *Model) denseMLP(w *mlpWeights, sc *ffnScratch, u, out []float32, T int) {
	inter := w.gate.Rows
	g := grow(&sc.gate, T*inter)
	up := grow(&sc.up, T*inter)
	m.matmulMulti([][]float32{g, up}, []*kernels.Matrix{w.gate, w.up}, u, T)
	swiglu(g, up)
	m.matmul(out, w.down, g, T)
}

// moeBlock is docs/qwen35-architecture.md §3.5 for T tokens. Tokens are
// grouped by expert so each expert is acquired and multiplied once per
// chunk; each token then sums its experts in ascending id order and adds
// the gated shared expert last, exactly as a single-token call does.
func (m *Model) moeBlock(layer int, w *moeWeights, sc *ffnScratch, u, out []float32, T int) error {
	c := &m.cfg
	E, k, H := c.NumExperts, c.ExpertsPerToken, c.HiddenSize
	logits := grow(&sc.router, T*E)
	// Everything that reads u goes in one pool job: the router, the shared
	// expert's gate and up, and its gate.
	Is := w.shared.gate.Rows
	sg, su := grow(&sc.sharedG, T*Is), grow(&sc.sharedU, T*Is)
	gates := grow(&sc.sharedGate, T)
	m.matmulMulti([][]float32{logits, sg, su, gates},
		[]*kernels.Matrix{w.router, w.shared.gate, w.shared.up, w.sharedGate}, u, T)
	sc.prof.markProducts(PhaseRouter, w.router, w.shared.gate, w.shared.up, w.sharedGate)
	if cap(sc.sel) < T*k {
		sc.sel = make([]int, T*k)
	}
	sel := sc.sel[:T*k]
	weight := grow(&sc.weight, T*k)
	if cap(sc.probs) < E {
		sc.probs = make([]float32, E)
	}
	for t := range T {
		route(logits[t*E:(t+1)*E], sc.probs[:E], sel[t*k:(t+1)*k], weight[t*k:(t+1)*k])
	}

	routed := grow(&sc.routed, T*k*H)
	swiglu(sg, su)
	sc.prof.mark(PhaseRouting, 0)
	// The shared expert's down product rides along with the routed experts'
	// (runExpertGroup) when they run fused; otherwise it runs on its own.
	sc.shared = pendingProduct{dst: out[:T*H], m: w.shared.down, x: sg}
	if err := m.runExperts(layer, sc, u, sel, routed, T); err != nil {
		sc.shared = pendingProduct{}
		return err
	}
	sc.prof.mark(PhaseExpertWait, 0)
	if sc.shared.m != nil {
		m.matmul(out, sc.shared.m, sc.shared.x, T) // out = shared expert output
		sc.prof.markProducts(PhaseSharedDown, sc.shared.m)
		sc.shared = pendingProduct{}
	}
	m.combineExperts(sc, gates, weight, routed, out, T)
	sc.prof.mark(PhaseCombine, 0)
	return nil
}

// combineExperts sets each token's out = Σ_s weight_s·routed_s + σ(gate)·out,
// the routed experts summed in ascending id order from zero, each product
// rounded to float32 before its add (kernels.AxpyRows), the gated shared
// expert output added last.
func (m *Model) combineExperts(sc *ffnScratch, gates, weight, routed, out []float32, T int) {
	k, H := m.cfg.ExpertsPerToken, m.cfg.HiddenSize
	acc := grow(&sc.combined, H)
	for t := range T {
		clear(acc)
		for s := range k {
			kernels.AxpyRows(acc, weight[t*k+s:t*k+s+1], routed[(t*k+s)*H:(t*k+s+1)*H])
		}
		o := out[t*H : (t+1)*H]
		sc.sigma[0] = sigmoid32(gates[t])
		kernels.AxpyRows(acc, sc.sigma[:], o)
		copy(o, acc)
	}
}

// route computes the router softmax in float64 rounded to float32 (the
// precision transformers keeps), picks the k most probable experts, the lower
// index first on ties, and writes them in ascending id order with weights
// renormalised over the selection.
func route(logits []float32, probs []float32, sel []int, weight []float32) {
	maxLogit := math.Inf(-1)
	for _, l := range logits {
		maxLogit = max(maxLogit, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxLogit)
	}
	for e, l := range logits {
		probs[e] = float32(math.Exp(float64(l)-maxLogit) / sum)
	}
	for s := range sel {
		best := -1
		for e, p := range probs {
			if (best < 0 || p > probs[best]) && !slices.Contains(sel[:s], e) {
				best = e
			}
		}
		sel[s] = best
	}
	slices.Sort(sel)
	var total float32
	for _, e := range sel {
		total += probs[e]
	}
	for s, e := range sel {
		weight[s] = probs[e] / total
	}
}

// runExperts computes every selected expert's output for its tokens into
// routed [T, k, H] (unweighted). Each output lands in its own (token, slot)
// row and is summed later in ascending expert order, so the order experts
// are computed in — Visit's arrival order, or ascending Acquire batches —
// never changes the result.
func (m *Model) runExperts(layer int, sc *ffnScratch, u []float32, sel []int, routed []float32, T int) error {
	c := &m.cfg
	E, k := c.NumExperts, c.ExpertsPerToken
	if len(sc.users) < E {
		sc.users = make([][]tokenSlot, E)
	}
	users := sc.users[:E]
	for e := range users {
		users[e] = users[e][:0]
	}
	for t := range T {
		for s, e := range sel[t*k : (t+1)*k] {
			users[e] = append(users[e], tokenSlot{token: t, slot: s})
		}
	}
	ids := sc.ids[:0]
	for e := range users {
		if len(users[e]) > 0 {
			ids = append(ids, e)
		}
	}
	sc.ids = ids
	if v, ok := m.experts.(ExpertGroupVisitor); ok {
		return m.visitExpertGroups(v, layer, sc, u, ids, routed, T)
	}
	if v, ok := m.experts.(ExpertVisitor); ok {
		return m.visitExpertGroups(&singletonGroups{v: v}, layer, sc, u, ids, routed, T)
	}
	batch := len(ids)
	if lim, ok := m.experts.(AcquireLimiter); ok {
		if n := lim.MaxAcquire(); n > 0 {
			batch = n
		}
	}
	for start := 0; start < len(ids); start += batch {
		part := ids[start:min(start+batch, len(ids))]
		if err := m.acquireBatch(layer, sc, u, part, routed); err != nil {
			return err
		}
	}
	return nil
}

func (m *Model) acquireBatch(layer int, sc *ffnScratch, u []float32, ids []int, routed []float32) error {
	mats, release, err := m.experts.Acquire(layer, ids)
	if err != nil {
		return fmt.Errorf("qwen35: layer %d: acquiring experts %v: %w", layer, ids, err)
	}
	defer release()
	if len(mats) != len(ids) {
		return fmt.Errorf("qwen35: layer %d: Experts.Acquire returned %d experts for %d ids", layer, len(mats), len(ids))
	}
	for i, e := range ids {
		if err := m.runExpert(layer, e, mats[i], sc, u, routed); err != nil {
			return err
		}
	}
	return nil
}

// singletonGroups hands an ExpertVisitor's experts over as groups of one.
type singletonGroups struct {
	v    ExpertVisitor
	idx  [1]int
	mats [1]ExpertMats
}

func (g *singletonGroups) VisitGroups(layer int, ids []int, fn func([]int, []ExpertMats) error) error {
	return g.v.Visit(layer, ids, func(i int, em ExpertMats) error {
		g.idx[0], g.mats[0] = i, em
		return fn(g.idx[:], g.mats[:])
	})
}

// visitExpertGroups computes the experts in the groups v hands them over,
// and checks that every one was handed over exactly once: a skipped expert
// would leave stale rows in routed. A group of two or more experts in a
// one-token chunk (decode) runs fused (runExpertGroup), anything else
// expert by expert.
func (m *Model) visitExpertGroups(v ExpertGroupVisitor, layer int, sc *ffnScratch, u []float32, ids []int, routed []float32, T int) error {
	if cap(sc.visited) < len(ids) {
		sc.visited = make([]bool, len(ids))
	}
	visited := sc.visited[:len(ids)]
	clear(visited)
	err := v.VisitGroups(layer, ids, func(idx []int, mats []ExpertMats) error {
		if len(idx) != len(mats) {
			return fmt.Errorf("qwen35: layer %d: Experts handed over %d indices with %d experts", layer, len(idx), len(mats))
		}
		for _, i := range idx {
			if i < 0 || i >= len(ids) || visited[i] {
				return fmt.Errorf("qwen35: layer %d: Experts handed over index %d of %d twice or out of range", layer, i, len(ids))
			}
			visited[i] = true
		}
		if T == 1 && len(idx) > 1 {
			return m.runExpertGroup(layer, idx, mats, sc, u, routed)
		}
		for j, i := range idx {
			if err := m.runExpert(layer, ids[i], mats[j], sc, u, routed); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("qwen35: layer %d: visiting experts %v: %w", layer, ids, err)
	}
	for i, ok := range visited {
		if !ok {
			return fmt.Errorf("qwen35: layer %d: Experts never handed over expert %d", layer, ids[i])
		}
	}
	return nil
}

// runExpertGroup computes several experts for the chunk's single token:
// every gate and up product as one pool job (they share the input), SwiGLU
// over all of them, then every down product as one job, each output
// bitwise what runExpert gives.
func (m *Model) runExpertGroup(layer int, idx []int, mats []ExpertMats, sc *ffnScratch, u, routed []float32) error {
	c := &m.cfg
	H, I, n := c.HiddenSize, c.ExpertIntermediate, len(idx)
	gate, up, ys := grow(&sc.groupGate, n*I), grow(&sc.groupUp, n*I), grow(&sc.groupY, n*H)
	sc.groupDsts, sc.groupMats = sc.groupDsts[:0], sc.groupMats[:0]
	for j, em := range mats {
		if err := checkExpert(em, I, H); err != nil {
			return fmt.Errorf("qwen35: layer %d expert %d: %w", layer, sc.ids[idx[j]], err)
		}
		sc.groupDsts = append(sc.groupDsts, gate[j*I:(j+1)*I], up[j*I:(j+1)*I])
		sc.groupMats = append(sc.groupMats, em.Gate, em.Up)
	}
	sc.prof.mark(PhaseExpertWait, 0)
	m.matmulMulti(sc.groupDsts, sc.groupMats, u[:H], 1)
	sc.prof.markProducts(PhaseExpertGateUp, sc.groupMats...)
	swiglu(gate, up)
	sc.groupDsts, sc.groupMats, sc.groupIns = sc.groupDsts[:0], sc.groupMats[:0], sc.groupIns[:0]
	for j, em := range mats {
		sc.groupDsts = append(sc.groupDsts, ys[j*H:(j+1)*H])
		sc.groupMats = append(sc.groupMats, em.Down)
		sc.groupIns = append(sc.groupIns, gate[j*I:(j+1)*I])
	}
	if sc.shared.m != nil {
		sc.groupDsts = append(sc.groupDsts, sc.shared.dst)
		sc.groupMats = append(sc.groupMats, sc.shared.m)
		sc.groupIns = append(sc.groupIns, sc.shared.x)
		sc.shared = pendingProduct{}
	}
	m.pool.MatVecFastEach(sc.groupDsts, sc.groupMats, sc.groupIns)
	sc.prof.markProducts(PhaseExpertDown, sc.groupMats...)
	k := c.ExpertsPerToken
	for j, i := range idx {
		r := sc.users[sc.ids[i]][0] // the chunk's one token
		slot := r.token*k + r.slot
		copy(routed[slot*H:(slot+1)*H], ys[j*H:(j+1)*H])
	}
	return nil
}

// runExpert computes expert e for the tokens routed to it, as one batched
// product per matrix, and scatters the rows to their (token, slot) places.
func (m *Model) runExpert(layer, e int, em ExpertMats, sc *ffnScratch, u, routed []float32) error {
	c := &m.cfg
	H, I, k := c.HiddenSize, c.ExpertIntermediate, c.ExpertsPerToken
	if err := checkExpert(em, I, H); err != nil {
		return fmt.Errorf("qwen35: layer %d expert %d: %w", layer, e, err)
	}
	rs := sc.users[e]
	n := len(rs)
	xs := grow(&sc.xs, n*H)
	for j, r := range rs {
		copy(xs[j*H:(j+1)*H], u[r.token*H:(r.token+1)*H])
	}
	g := grow(&sc.gate, n*I)
	up := grow(&sc.up, n*I)
	sc.prof.mark(PhaseExpertWait, 0)
	m.matmulMulti([][]float32{g, up}, []*kernels.Matrix{em.Gate, em.Up}, xs, n)
	sc.prof.markProducts(PhaseExpertGateUp, em.Gate, em.Up)
	swiglu(g, up)
	ys := grow(&sc.ys, n*H)
	m.matmul(ys, em.Down, g, n)
	sc.prof.markProducts(PhaseExpertDown, em.Down)
	for j, r := range rs {
		slot := r.token*k + r.slot
		copy(routed[slot*H:(slot+1)*H], ys[j*H:(j+1)*H])
	}
	return nil
}

func checkExpert(em ExpertMats, I, H int) error {
	if err := checkMatrix(em.Gate, I, H); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if err := checkMatrix(em.Up, I, H); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	if err := checkMatrix(em.Down, H, I); err != nil {
		return fmt.Errorf("down: %w", err)
	}
	return nil
}
