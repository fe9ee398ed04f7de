package blocks

import (
	"fmt"
	"math"
	"slices"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// MoE runs the MoE block of docs/qwen35-architecture.md §3.5 (the same in
// qwen38, §3.7) over routed experts served through the moe contract.
type MoE struct {
	Name                 string // prefix of errors: the architecture package
	Pool                 *kernels.Pool
	Experts              model.Experts
	NumExperts, TopK     int // E, k
	Hidden, Intermediate int // H, I (of a routed expert)
}

// MoEWeights are one layer's resident MoE tensors.
type MoEWeights struct {
	Router     *kernels.Matrix // [E, H]
	Shared     MLPWeights      // the shared expert
	SharedGate *kernels.Matrix // [1, H]
}

// MLPWeights is one SwiGLU MLP: down · (silu(gate·x) ⊙ up·x).
type MLPWeights struct{ Gate, Up, Down *kernels.Matrix }

// MoEScratch holds the per-chunk buffers of the MoE block.
type MoEScratch struct {
	gate, up   []float32     // [T, I]
	sharedG    []float32     // shared expert gate, then swiglu [T, Is]
	sharedU    []float32     // shared expert up [T, Is]
	router     []float32     // router logits [T, E]
	sel        []int         // selected experts per token, ascending [T, k]
	weight     []float32     // their renormalised weights [T, k]
	probs      []float32     // one token's softmax [E] per thread
	users      [][]tokenSlot // per expert: the (token, slot) pairs routed to it
	ids        []int         // distinct experts of the chunk, ascending
	firstRow   []int         // per index of ids: the expert's first row of routed
	rowOf      []int32       // per (token, slot): its row of routed
	visited    []bool        // per index of ids: handed over by Visit
	xs         []float32     // gathered inputs [n, H] of one expert
	routed     []float32     // every routed expert output [T·k, H], expert by expert, weighted later
	sharedGate []float32     // [T]

	// runExpertGroup's scratch: gate and up outputs of the group's
	// experts back to back, and the job's operand lists.
	groupGate, groupUp  []float32
	groupDsts, groupIns [][]float32
	groupMats           []*kernels.Matrix

	shared   pendingProduct     // the shared expert's down product, until it has run
	combined []float32          // one token's combined expert output [H] per thread
	sigma    []float32          // one token's shared-expert gate per thread
	Prof     *model.StepProfile // the state's profile during a decode step, else nil

	// Override, when set, names each token's experts in place of the
	// router's top-k (model.RouteOverride: a benchmark replaying realistic
	// routing); Pos is the sequence position of the pass's first token,
	// which the model sets before each pass. The routed weights stay the
	// router's softmax at those ids, renormalised as Route does.
	Override model.RouteOverride
	Pos      int
}

// pendingProduct is a single-token dst = m·x that may join another job.
type pendingProduct struct {
	dst []float32
	m   *kernels.Matrix
	x   []float32
}

type tokenSlot struct{ token, slot int }

// Block is docs/qwen35-architecture.md §3.5 for T tokens: out [T, H] from
// the inputs u [T, H]. Tokens are
// grouped by expert so each expert is acquired and multiplied once per
// chunk; each token then sums its experts in ascending id order and adds
// the gated shared expert last, exactly as a single-token call does.
func (m *MoE) Block(layer int, w *MoEWeights, sc *MoEScratch, u, out []float32, T int) error {
	E, k, H := m.NumExperts, m.TopK, m.Hidden
	logits := Grow(&sc.router, T*E)
	// Everything that reads u goes in one pool job: the router, the shared
	// expert's gate and up, and its gate.
	Is := w.Shared.Gate.Rows
	sg, su := Grow(&sc.sharedG, T*Is), Grow(&sc.sharedU, T*Is)
	gates := Grow(&sc.sharedGate, T)
	MatMulMulti(m.Pool, [][]float32{logits, sg, su, gates},
		[]*kernels.Matrix{w.Router, w.Shared.Gate, w.Shared.Up, w.SharedGate}, u, T)
	sc.Prof.MarkProducts(model.PhaseRouter, w.Router, w.Shared.Gate, w.Shared.Up, w.SharedGate)
	if cap(sc.sel) < T*k {
		sc.sel = make([]int, T*k)
	}
	sel := sc.sel[:T*k]
	weight := Grow(&sc.weight, T*k)
	probs := Grow(&sc.probs, m.Pool.Threads()*E)
	// Tokens route independently: the pool's threads split a pass's.
	if sc.Override != nil {
		if err := m.overrideRoutes(layer, sc, logits, probs, sel, weight, T); err != nil {
			return err
		}
	} else if T >= parallelMinTokens {
		m.Pool.Parallel(T, func(worker, lo, hi int) {
			routeTokens(logits, probs[worker*E:(worker+1)*E], sel, weight, k, lo, hi)
		})
	} else {
		routeTokens(logits, probs[:E], sel, weight, k, 0, T)
	}

	routed := Grow(&sc.routed, T*k*H)
	SwiGLU(sg, su)
	sc.Prof.Mark(model.PhaseRouting, 0)
	// The shared expert's down product rides along with the routed experts'
	// (runExpertGroup) when they run fused; otherwise it runs on its own.
	sc.shared = pendingProduct{dst: out[:T*H], m: w.Shared.Down, x: sg}
	if err := m.runExperts(layer, sc, u, sel, routed, T); err != nil {
		sc.shared = pendingProduct{}
		return err
	}
	sc.Prof.Mark(model.PhaseExpertWait, 0)
	if sc.shared.m != nil {
		MatMul(m.Pool, out, sc.shared.m, sc.shared.x, T) // out = shared expert output
		sc.Prof.MarkProducts(model.PhaseSharedDown, sc.shared.m)
		sc.shared = pendingProduct{}
	}
	m.combineExperts(sc, gates, weight, routed, sc.rowOf[:T*k], out, T)
	sc.Prof.Mark(model.PhaseCombine, 0)
	return nil
}

// BeginPass tells the experts, before a pass's first layer runs, that it
// carries T tokens (model.PassWarmer), so a streaming cache can read the
// first layer's experts during the embeddings and the first mixer. Nothing
// it does reaches the output.
func (m *MoE) BeginPass(T int) {
	if w, ok := m.Experts.(model.PassWarmer); ok && T > 1 {
		w.BeginPass(T)
	}
}

// combineExperts sets each token's out = Σ_s weight_s·routed_s + σ(gate)·out,
// routed_s the row rowOf[t·k+s] of routed, the routed experts summed in
// ascending id order from zero, each product rounded to float32 before its
// add (kernels.AxpyRows), the gated shared expert output added last. The
// pool's threads split a pass's tokens.
func (m *MoE) combineExperts(sc *MoEScratch, gates, weight, routed []float32, rowOf []int32, out []float32, T int) {
	H := m.Hidden
	accs, sigmas := Grow(&sc.combined, m.Pool.Threads()*H), Grow(&sc.sigma, m.Pool.Threads())
	if T < parallelMinTokens {
		m.combineTokens(accs[:H], sigmas[:1], gates, weight, routed, rowOf, out, 0, T)
		return
	}
	m.Pool.Parallel(T, func(worker, lo, hi int) {
		m.combineTokens(accs[worker*H:(worker+1)*H], sigmas[worker:worker+1], gates, weight, routed, rowOf, out, lo, hi)
	})
}

// combineTokens is combineExperts for tokens [lo, hi), acc [H] and sigma
// [1] its scratch.
func (m *MoE) combineTokens(acc, sigma, gates, weight, routed []float32, rowOf []int32, out []float32, lo, hi int) {
	k, H := m.TopK, m.Hidden
	for t := lo; t < hi; t++ {
		clear(acc)
		for s := range k {
			r := int(rowOf[t*k+s])
			kernels.AxpyRows(acc, weight[t*k+s:t*k+s+1], routed[r*H:(r+1)*H])
		}
		o := out[t*H : (t+1)*H]
		sigma[0] = Sigmoid32(gates[t])
		kernels.AxpyRows(acc, sigma, o)
		copy(o, acc)
	}
}

// routeTokens routes tokens [lo, hi) of logits [T, E] into sel and weight
// [T, k], probs [E] its scratch.
func routeTokens(logits, probs []float32, sel []int, weight []float32, k, lo, hi int) {
	E := len(probs)
	for t := lo; t < hi; t++ {
		Route(logits[t*E:(t+1)*E], probs, sel[t*k:(t+1)*k], weight[t*k:(t+1)*k])
	}
}

// Route computes the router softmax in float64 rounded to float32 (the
// precision transformers keeps), picks the k most probable experts, the lower
// index first on ties, and writes them in ascending id order with weights
// renormalised over the selection.
func Route(logits []float32, probs []float32, sel []int, weight []float32) {
	routerSoftmax(logits, probs)
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
	renormalise(probs, sel, weight)
}

// RouteFixed is Route with the experts given: sel, ascending and distinct,
// keeps its ids and weight gets the router's softmax at them, renormalised
// over them exactly as Route renormalises its own pick.
func RouteFixed(logits []float32, probs []float32, sel []int, weight []float32) {
	routerSoftmax(logits, probs)
	renormalise(probs, sel, weight)
}

// routerSoftmax is the router softmax in float64 rounded to float32.
func routerSoftmax(logits, probs []float32) {
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
}

// renormalise sets weight to probs at sel over their float32 sum, summed
// in sel's (ascending) order: the model's norm_topk_prob.
func renormalise(probs []float32, sel []int, weight []float32) {
	var total float32
	for _, e := range sel {
		total += probs[e]
	}
	for s, e := range sel {
		weight[s] = probs[e] / total
	}
}

// overrideRoutes routes tokens [0, T) to the experts sc.Override names for
// their positions. The override is asked token by token on the caller (a
// trace reader need not be safe for concurrent use); the softmax and the
// weights then split over the pool's threads as routeTokens' do.
func (m *MoE) overrideRoutes(layer int, sc *MoEScratch, logits, probs []float32, sel []int, weight []float32, T int) error {
	E, k := m.NumExperts, m.TopK
	for t := range T {
		pos := sc.Pos + t
		slot := sel[t*k : (t+1)*k]
		// Capped at k, so an override that appends too many cannot
		// overwrite the next token's experts.
		ids, err := sc.Override.Experts(pos, layer, slot[:0:k])
		if err != nil {
			return fmt.Errorf(m.Name+": layer %d, position %d: routing override: %w", layer, pos, err)
		}
		if len(ids) != k {
			return fmt.Errorf(m.Name+": layer %d, position %d: the routing override named %d experts, the model routes each token to %d", layer, pos, len(ids), k)
		}
		copy(slot, ids)
		slices.Sort(slot)
		for i, e := range slot {
			if e < 0 || e >= E {
				return fmt.Errorf(m.Name+": layer %d, position %d: the routing override named expert %d; the layer has experts 0 to %d", layer, pos, e, E-1)
			}
			if i > 0 && slot[i-1] == e {
				return fmt.Errorf(m.Name+": layer %d, position %d: the routing override named expert %d twice", layer, pos, e)
			}
		}
	}
	if T >= parallelMinTokens {
		m.Pool.Parallel(T, func(worker, lo, hi int) {
			routeFixedTokens(logits, probs[worker*E:(worker+1)*E], sel, weight, k, lo, hi)
		})
	} else {
		routeFixedTokens(logits, probs[:E], sel, weight, k, 0, T)
	}
	return nil
}

// routeFixedTokens is routeTokens for experts already in sel.
func routeFixedTokens(logits, probs []float32, sel []int, weight []float32, k, lo, hi int) {
	E := len(probs)
	for t := lo; t < hi; t++ {
		RouteFixed(logits[t*E:(t+1)*E], probs, sel[t*k:(t+1)*k], weight[t*k:(t+1)*k])
	}
}

// runExperts computes every selected expert's output for its tokens into
// routed [T·k, H] (unweighted): expert ids[i]'s rows from firstRow[i] on,
// in its users' order, so a product writes them in place; rowOf maps each
// (token, slot) to its row. Each output is summed later in ascending expert
// order, so the order experts are computed in — Visit's arrival order, or
// ascending Acquire batches — never changes the result.
func (m *MoE) runExperts(layer int, sc *MoEScratch, u []float32, sel []int, routed []float32, T int) error {
	E, k := m.NumExperts, m.TopK
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
	ids, firstRow := sc.ids[:0], sc.firstRow[:0]
	if cap(sc.rowOf) < T*k {
		sc.rowOf = make([]int32, T*k)
	}
	rowOf, row := sc.rowOf[:T*k], 0
	for e := range users {
		if len(users[e]) == 0 {
			continue
		}
		ids, firstRow = append(ids, e), append(firstRow, row)
		for _, r := range users[e] {
			rowOf[r.token*k+r.slot] = int32(row)
			row++
		}
	}
	sc.ids, sc.firstRow = ids, firstRow
	if v, ok := m.Experts.(model.ExpertGroupVisitor); ok {
		return m.visitExpertGroups(v, layer, sc, u, ids, routed, T)
	}
	if v, ok := m.Experts.(model.ExpertVisitor); ok {
		return m.visitExpertGroups(&singletonGroups{v: v}, layer, sc, u, ids, routed, T)
	}
	batch := len(ids)
	if lim, ok := m.Experts.(model.AcquireLimiter); ok {
		if n := lim.MaxAcquire(); n > 0 {
			batch = n
		}
	}
	for start := 0; start < len(ids); start += batch {
		end := min(start+batch, len(ids))
		if err := m.acquireBatch(layer, sc, u, ids[start:end], sc.firstRow[start:end], routed); err != nil {
			return err
		}
	}
	return nil
}

func (m *MoE) acquireBatch(layer int, sc *MoEScratch, u []float32, ids, firstRow []int, routed []float32) error {
	mats, release, err := m.Experts.Acquire(layer, ids)
	if err != nil {
		return fmt.Errorf(m.Name+": layer %d: acquiring experts %v: %w", layer, ids, err)
	}
	defer release()
	if len(mats) != len(ids) {
		return fmt.Errorf(m.Name+": layer %d: Experts.Acquire returned %d experts for %d ids", layer, len(mats), len(ids))
	}
	for i, e := range ids {
		if err := m.runExpert(layer, e, mats[i], sc, u, routed, firstRow[i]); err != nil {
			return err
		}
	}
	return nil
}

// singletonGroups hands an ExpertVisitor's experts over as groups of one.
type singletonGroups struct {
	v    model.ExpertVisitor
	idx  [1]int
	mats [1]model.ExpertMats
}

func (g *singletonGroups) VisitGroups(layer int, ids []int, fn func([]int, []model.ExpertMats) error) error {
	return g.v.Visit(layer, ids, func(i int, em model.ExpertMats) error {
		g.idx[0], g.mats[0] = i, em
		return fn(g.idx[:], g.mats[:])
	})
}

// visitExpertGroups computes the experts in the groups v hands them over,
// and checks that every one was handed over exactly once: a skipped expert
// would leave stale rows in routed. A group of two or more experts in a
// one-token chunk (decode) runs fused (runExpertGroup), anything else
// expert by expert.
func (m *MoE) visitExpertGroups(v model.ExpertGroupVisitor, layer int, sc *MoEScratch, u []float32, ids []int, routed []float32, T int) error {
	if cap(sc.visited) < len(ids) {
		sc.visited = make([]bool, len(ids))
	}
	visited := sc.visited[:len(ids)]
	clear(visited)
	err := v.VisitGroups(layer, ids, func(idx []int, mats []model.ExpertMats) error {
		if len(idx) != len(mats) {
			return fmt.Errorf(m.Name+": layer %d: Experts handed over %d indices with %d experts", layer, len(idx), len(mats))
		}
		for _, i := range idx {
			if i < 0 || i >= len(ids) || visited[i] {
				return fmt.Errorf(m.Name+": layer %d: Experts handed over index %d of %d twice or out of range", layer, i, len(ids))
			}
			visited[i] = true
		}
		if T == 1 && len(idx) > 1 {
			return m.runExpertGroup(layer, idx, mats, sc, u, routed)
		}
		for j, i := range idx {
			if err := m.runExpert(layer, ids[i], mats[j], sc, u, routed, sc.firstRow[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf(m.Name+": layer %d: visiting experts %v: %w", layer, ids, err)
	}
	for i, ok := range visited {
		if !ok {
			return fmt.Errorf(m.Name+": layer %d: Experts never handed over expert %d", layer, ids[i])
		}
	}
	return nil
}

// runExpertGroup computes several experts for the chunk's single token:
// every gate and up product as one pool job (they share the input), SwiGLU
// over all of them, then every down product as one job, each output
// bitwise what runExpert gives.
func (m *MoE) runExpertGroup(layer int, idx []int, mats []model.ExpertMats, sc *MoEScratch, u, routed []float32) error {
	H, I, n := m.Hidden, m.Intermediate, len(idx)
	gate, up := Grow(&sc.groupGate, n*I), Grow(&sc.groupUp, n*I)
	sc.groupDsts, sc.groupMats = sc.groupDsts[:0], sc.groupMats[:0]
	for j, em := range mats {
		if err := checkExpert(em, I, H); err != nil {
			return fmt.Errorf(m.Name+": layer %d expert %d: %w", layer, sc.ids[idx[j]], err)
		}
		sc.groupDsts = append(sc.groupDsts, gate[j*I:(j+1)*I], up[j*I:(j+1)*I])
		sc.groupMats = append(sc.groupMats, em.Gate, em.Up)
	}
	sc.Prof.Mark(model.PhaseExpertWait, 0)
	MatMulMulti(m.Pool, sc.groupDsts, sc.groupMats, u[:H], 1)
	sc.Prof.MarkProducts(model.PhaseExpertGateUp, sc.groupMats...)
	SwiGLU(gate, up)
	sc.groupDsts, sc.groupMats, sc.groupIns = sc.groupDsts[:0], sc.groupMats[:0], sc.groupIns[:0]
	for j, em := range mats {
		r := sc.firstRow[idx[j]] // the chunk's one token
		sc.groupDsts = append(sc.groupDsts, routed[r*H:(r+1)*H])
		sc.groupMats = append(sc.groupMats, em.Down)
		sc.groupIns = append(sc.groupIns, gate[j*I:(j+1)*I])
	}
	if sc.shared.m != nil {
		sc.groupDsts = append(sc.groupDsts, sc.shared.dst)
		sc.groupMats = append(sc.groupMats, sc.shared.m)
		sc.groupIns = append(sc.groupIns, sc.shared.x)
		sc.shared = pendingProduct{}
	}
	m.Pool.MatVecFastEach(sc.groupDsts, sc.groupMats, sc.groupIns)
	sc.Prof.MarkProducts(model.PhaseExpertDown, sc.groupMats...)
	return nil
}

// parallelMinTokens is the fewest tokens whose routing, combination or
// gather the pool's threads split; a decode step's single token (and a few
// more, by a choice not measured) stays on the caller, so a step takes no
// pool hand-off for them.
const parallelMinTokens = 16

// runExpert computes expert e for the tokens routed to it, as one batched
// product per matrix, its down product writing routed's rows from first on.
func (m *MoE) runExpert(layer, e int, em model.ExpertMats, sc *MoEScratch, u, routed []float32, first int) error {
	H, I := m.Hidden, m.Intermediate
	if err := checkExpert(em, I, H); err != nil {
		return fmt.Errorf(m.Name+": layer %d expert %d: %w", layer, e, err)
	}
	rs := sc.users[e]
	n := len(rs)
	xs := Grow(&sc.xs, n*H)
	if n >= parallelMinTokens {
		m.Pool.Parallel(n, func(_, lo, hi int) { gatherRows(xs, u, rs, H, lo, hi) })
	} else {
		gatherRows(xs, u, rs, H, 0, n)
	}
	g := Grow(&sc.gate, n*I)
	up := Grow(&sc.up, n*I)
	sc.Prof.Mark(model.PhaseExpertWait, 0)
	MatMulMulti(m.Pool, [][]float32{g, up}, []*kernels.Matrix{em.Gate, em.Up}, xs, n)
	sc.Prof.MarkProducts(model.PhaseExpertGateUp, em.Gate, em.Up)
	SwiGLU(g, up)
	MatMul(m.Pool, routed[first*H:(first+n)*H], em.Down, g, n)
	sc.Prof.MarkProducts(model.PhaseExpertDown, em.Down)
	return nil
}

// gatherRows copies the rows of u [T, H] that users [lo, hi) name into
// xs [n, H].
func gatherRows(xs, u []float32, users []tokenSlot, H, lo, hi int) {
	for j := lo; j < hi; j++ {
		t := users[j].token
		copy(xs[j*H:(j+1)*H], u[t*H:(t+1)*H])
	}
}

func checkExpert(em model.ExpertMats, I, H int) error {
	if err := CheckMatrix(em.Gate, I, H); err != nil {
		return fmt.Errorf("gate: %w", err)
	}
	if err := CheckMatrix(em.Up, I, H); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	if err := CheckMatrix(em.Down, H, I); err != nil {
		return fmt.Errorf("down: %w", err)
	}
	return nil
}

// TopIndices appends the indices of the n largest scores to dst, best
// first, the lower index first among equals.
func TopIndices(scores []float32, n int, dst []int) []int {
	for i, v := range scores {
		if len(dst) == n && v <= scores[dst[n-1]] {
			continue
		}
		if len(dst) < n {
			dst = append(dst, i)
		}
		j := len(dst) - 1
		for ; j > 0 && v > scores[dst[j-1]]; j-- {
			dst[j] = dst[j-1]
		}
		dst[j] = i
	}
	return dst
}

// GrowingBytes is the memory of the buffers that grow with the pass length
// (what a prefill's scratch bound has to cover).
func (sc *MoEScratch) GrowingBytes() int64 {
	var n int
	for _, b := range [][]float32{sc.gate, sc.up, sc.sharedG, sc.sharedU, sc.router, sc.weight,
		sc.xs, sc.routed, sc.sharedGate} {
		n += 4 * cap(b)
	}
	n += 8*cap(sc.sel) + 4*cap(sc.rowOf)
	for _, u := range sc.users {
		n += 16 * cap(u)
	}
	return int64(n)
}
