package gpu

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// The batched decode step (model.BatchStepper, serve --parallel): one
// forward over N rows, row r belonging to states[r]. The trunk's products
// (projections, router, shared and routed experts, lm_head) run over the N
// rows in one launch each, so every weight, and each routed expert picked
// by any row, is read once a step; the mixers run on each row's own
// state: the conv and the delta rule in one launch for the batch
// (gdn_conv_rows, gdn_rec_reg_rows: each row's state pointer passed by
// value, the one-token kernel's code per row; NVMAI_GPU_BATCH_ROWS=0
// launches them row by row), and the KV append and attention likewise
// where every row's cache is int8 or every row's bfloat16 (attn_*_rows;
// a float32 cache or mixed widths: row by row with T = 1). Each row is
// computed by the kernels a lone decode step launches (the fused
// mgemv/moe_down when Model.fuse, qgemv and fgemv otherwise; never the
// prefill's tensor-core products), whose blocks each take one token, or
// for the mixers by those kernels' own code on the row's values, so a
// row's floats are bitwise its state's own Forward of one token whatever
// the batch. Streamed experts are resolved to VRAM slots row by row where
// the slots hold every row's picks, else staged by id for the batch as a
// prefill pass stages them (batchExperts): the same bytes, so the same
// bits. A host-planned plan (streamhost.go) steps the states one by one.
//
// The step is captured as a CUDA graph per set of states (their number,
// identities and KV buffers: State.gen), kept for maxBatchGraphs sets, so a
// steady batch replays one graph; NVMAI_GPU_BATCH_GRAPH=0 launches directly.

// MaxBatch is the most rows one batched pass carries; StepBatch runs a
// larger batch MaxBatch states at a time.
const MaxBatch = 16

// The conv and delta rule take the batch's rows in one launch.
var _ [gpukernels.MaxRows - MaxBatch]struct{}

// maxBatchGraphs is how many captured batched steps a model keeps (the
// least recently replayed is destroyed first).
const maxBatchGraphs = 8

// stateGen numbers the KV buffers of states (State.gen): a batch graph
// bakes in every row's buffers, so it is keyed by these numbers.
var stateGen atomic.Uint64

func nextStateGen() uint64 { return stateGen.Add(1) }

// batcher is a model's batched-step scratch and graphs, made on the first
// batched step.
type batcher struct {
	s         scratch        // MaxBatch rows (eg and eu: k+1 vectors a row, moe_down's layout)
	tokens    cuda.DevicePtr // [MaxBatch] int32
	zeroSel   cuda.DevicePtr // [MaxBatch] int32 zeros: see gemvRows
	useGraphs bool
	// rowLaunches launches the mixers and the tail (argmax, the logits
	// copy, the position) row by row instead of once for the batch
	// (gdn_conv_rows, gdn_rec_reg_rows, attn_*_rows, head_rows); bitwise
	// the same (NVMAI_GPU_BATCH_ROWS=0, to measure or to rule them out).
	rowLaunches bool
	// fixed holds the rows' replayed experts [layer][row][k] when every row
	// replays (one route launch a layer instead of one a row); fixedHost,
	// one and oneIDs are its staging on the host.
	fixed     cuda.DevicePtr
	fixedHost []int32
	one       []int32
	oneIDs    []int
	// slotSel is a streamed layer's picks resolved to slots, [row][k]
	// (batchExperts); stageStreamed stages every streamed batch instead
	// (NVMAI_GPU_BATCH_STAGE=1, to compare).
	slotSel       cuda.DevicePtr
	stageStreamed bool
	ptrs          []cuda.DevicePtr     // the rows' state buffers of one layer
	attn          []gpukernels.AttnRow // the rows' attention state of one layer
	graphs        []batchGraph         // least recently replayed first
}

type batchGraph struct {
	key     string
	g       *cuda.Graph
	kernels int
}

var _ model.BatchStepper = (*Backend)(nil)

// StepBatch implements model.BatchStepper: every argument is checked
// before any state changes; then each state whose next token passes its KV
// capacity grows it as Forward would, and one batched pass (MaxBatch rows
// at a time) feeds ids[i] to states[i]. Afterwards each state's logits,
// greedy pick (Argmax) and device sampling (Sample) are those of its own
// Forward(ids[i:i+1]), bitwise. logits, when non-nil, gets [N, V]. A
// failure after the checks fails every state of the batch, as a failed
// Forward fails its state.
func (b *Backend) StepBatch(states []model.State, ids []int, logits []float32) error {
	m := b.Model
	sts, err := m.checkBatch(states, ids, logits)
	if err != nil {
		return err
	}
	err = m.dev.Do(func(c *cuda.Ctx) error { return m.stepBatch(c, sts, ids, logits) })
	if err != nil {
		for _, st := range sts {
			st.failed = err
		}
	}
	return err
}

// checkBatch refuses what StepBatch cannot run, naming the state: nothing
// is enqueued before it passes.
func (m *Model) checkBatch(states []model.State, ids []int, logits []float32) ([]*State, error) {
	N, V := len(states), m.geom.V
	switch {
	case N == 0:
		return nil, fmt.Errorf("gpu: StepBatch: no states")
	case len(ids) != N:
		return nil, fmt.Errorf("gpu: StepBatch: %d states but %d tokens; give each state exactly one token", N, len(ids))
	case logits != nil && len(logits) != N*V:
		return nil, fmt.Errorf("gpu: StepBatch: logits has %d values, want %d states × vocab %d = %d", len(logits), N, V, N*V)
	}
	sts := make([]*State, N)
	for i, s := range states {
		st, ok := s.(*State)
		switch {
		case !ok || st == nil || st.m != m:
			return nil, fmt.Errorf("gpu: StepBatch: state %d (%T) was not made by this model's NewState", i, s)
		case st.allocs == nil:
			return nil, fmt.Errorf("gpu: StepBatch: state %d is closed; make a new one with NewState", i)
		case st.failed != nil:
			return nil, fmt.Errorf("gpu: StepBatch: state %d failed earlier (%v); start a new one or restore a snapshot", i, st.failed)
		case ids[i] < 0 || ids[i] >= V:
			return nil, fmt.Errorf("gpu: StepBatch: token %d of state %d is outside the vocabulary [0, %d)", ids[i], i, V)
		case st.pos+1 > st.maxCtx:
			return nil, fmt.Errorf("gpu: StepBatch: state %d holds %d tokens, its max context; start a new sequence or raise StateOptions.MaxContext", i, st.pos)
		}
		// Batches are a few states: a quadratic scan beats a map's allocation.
		for j := range i {
			if sts[j] == st {
				return nil, fmt.Errorf("gpu: StepBatch: state %d is also state %d; a state takes one token per step", i, j)
			}
		}
		sts[i] = st
	}
	return sts, nil
}

// stepBatch is a checked StepBatch's device work.
func (m *Model) stepBatch(c *cuda.Ctx, sts []*State, ids []int, logits []float32) error {
	for _, st := range sts { // as devshared.RunForward grows a state's KV cache
		if need := st.pos + 1; need > st.kcap {
			capacity := st.kcap
			for capacity < need {
				capacity *= 2
			}
			if err := st.allocKV(c, min(capacity, st.maxCtx), st.pos); err != nil {
				return err
			}
		}
	}
	if m.hostPlanned() { // the host works between the layers of each state's step (streamhost.go)
		for i, st := range sts {
			if err := st.chunk(c, ids[i:i+1]); err != nil {
				return err
			}
		}
	} else {
		for lo := 0; lo < len(sts); lo += MaxBatch {
			hi := min(lo+MaxBatch, len(sts))
			if err := m.batchPass(c, sts[lo:hi], ids[lo:hi]); err != nil {
				return err
			}
			for _, st := range sts[lo:hi] {
				st.pos++
			}
		}
	}
	if logits != nil {
		V := m.geom.V
		for i, st := range sts {
			if err := c.DtoH(cuda.Bytes(logits[i*V:(i+1)*V]), st.s.logits); err != nil {
				return err
			}
		}
	}
	return nil
}

// batchPass runs one batched step of at most MaxBatch states: the tokens
// and replayed routes are copied first (outside any graph), then the
// forward is replayed from a graph captured for this set of states, or
// captured now, or launched directly.
func (m *Model) batchPass(c *cuda.Ctx, sts []*State, ids []int) error {
	bt, err := m.batchScratch(c)
	if err != nil {
		return err
	}
	tok := make([]int32, len(ids))
	for i, id := range ids {
		tok[i] = int32(id)
	}
	// Async: pageable memory is staged at the call (State.chunk).
	if err := c.HtoDAsync(bt.tokens, cuda.Bytes(tok)); err != nil {
		return err
	}
	graphs := bt.useGraphs
	for _, st := range sts {
		graphs = graphs && !st.noGraph
	}
	if err := m.stageBatchRoutes(c, bt, sts); err != nil {
		return err
	}
	l := &gpukernels.Launcher{C: c, K: m.ks, MMA: m.mma, GDNPipe: m.gdnPipe, GDNPar: m.gdnPar, GDNReg: m.gdnReg}
	if !graphs {
		return m.forwardBatch(l, bt, sts)
	}
	key := batchKey(sts)
	g := bt.graph(key)
	if g == nil {
		if err := c.BeginCapture(); err != nil {
			return err
		}
		ferr := m.forwardBatch(l, bt, sts)
		cg, err := c.EndCapture()
		if ferr != nil {
			if cg != nil {
				c.DestroyGraph(cg)
			}
			return ferr
		}
		if err != nil {
			return err
		}
		g = bt.keep(c, batchGraph{key: key, g: cg, kernels: l.Count})
	}
	return c.LaunchGraph(g.g)
}

// allReplay reports whether every row replays its routing.
func allReplay(sts []*State) bool {
	for _, st := range sts {
		if st.replay.o == nil {
			return false
		}
	}
	return true
}

// stageBatchRoutes copies the replaying rows' experts at their positions
// to the device ahead of the pass: every row's into bt.fixed [layer][row][k]
// when all replay (routeBatch then routes the rows in one launch), else
// each replaying state's own (stageRoutes).
func (m *Model) stageBatchRoutes(c *cuda.Ctx, bt *batcher, sts []*State) error {
	if !allReplay(sts) {
		for _, st := range sts {
			if err := st.stageRoutes(c, 1); err != nil {
				return err
			}
		}
		return nil
	}
	g, L, N := m.geom, len(m.layers), len(sts)
	moe := make([]bool, L)
	for i := range m.layers {
		moe[i] = m.layers[i].router != nil
	}
	bt.fixedHost = slices.Grow(bt.fixedHost[:0], L*N*g.k)[:L*N*g.k]
	for r, st := range sts {
		var err error
		if bt.one, bt.oneIDs, err = gatherRoutes(st.replay.o, moe, st.pos, 1, g.k, g.E, bt.one, bt.oneIDs); err != nil {
			return err
		}
		for layer := range L {
			copy(bt.fixedHost[(layer*N+r)*g.k:(layer*N+r+1)*g.k], bt.one[layer*g.k:(layer+1)*g.k])
		}
	}
	return c.HtoDAsync(bt.fixed, cuda.Bytes(bt.fixedHost))
}

// batchKey names what a batch graph bakes in: the rows' states in order,
// each by its KV buffers' generation and its kind of routing (a replay
// reads its own ids buffer).
func batchKey(sts []*State) string {
	b := make([]byte, 0, 16*len(sts))
	for _, st := range sts {
		b = strconv.AppendUint(b, st.gen, 10)
		if st.replay.o != nil {
			b = append(b, 'r')
		}
		b = append(b, ',')
	}
	return string(b)
}

// graph returns the graph captured for key, marking it the most recently
// replayed, or nil.
func (bt *batcher) graph(key string) *batchGraph {
	for i, g := range bt.graphs {
		if g.key == key {
			bt.graphs = append(append(bt.graphs[:i:i], bt.graphs[i+1:]...), g)
			return &bt.graphs[len(bt.graphs)-1]
		}
	}
	return nil
}

// keep adds g, destroying the least recently replayed graph past
// maxBatchGraphs (a set of states that has changed, or closed, is never
// asked for again).
func (bt *batcher) keep(c *cuda.Ctx, g batchGraph) *batchGraph {
	if len(bt.graphs) >= maxBatchGraphs {
		c.DestroyGraph(bt.graphs[0].g)
		bt.graphs = append(bt.graphs[:0], bt.graphs[1:]...)
	}
	bt.graphs = append(bt.graphs, g)
	return &bt.graphs[len(bt.graphs)-1]
}

// close destroys the captured graphs (the scratch is in Model.allocs).
func (bt *batcher) close(c *cuda.Ctx) {
	for _, g := range bt.graphs {
		c.DestroyGraph(g.g)
	}
	bt.graphs = nil
}

// BatchGraphs is how many batched-step graphs the model holds and the
// kernels of the most recently captured (0, 0 before any), for the tests
// and the bench.
func (m *Model) BatchGraphs() (graphs, kernels int) {
	m.dev.Do(func(*cuda.Ctx) error { // m.batch is the device goroutine's
		if m.batch != nil && len(m.batch.graphs) > 0 {
			graphs, kernels = len(m.batch.graphs), m.batch.graphs[len(m.batch.graphs)-1].kernels
		}
		return nil
	})
	return graphs, kernels
}

// batchScratch makes the model's batched-step scratch on first use: a
// pass's buffers for MaxBatch rows (freed with the model).
func (m *Model) batchScratch(c *cuda.Ctx) (*batcher, error) {
	if m.batch != nil {
		return m.batch, nil
	}
	g := m.geom
	bt := &batcher{useGraphs: os.Getenv("NVMAI_GPU_BATCH_GRAPH") != "0", rowLaunches: os.Getenv("NVMAI_GPU_BATCH_ROWS") == "0",
		stageStreamed: os.Getenv("NVMAI_GPU_BATCH_STAGE") == "1"}
	z := &devshared.Zeroed{C: c, Allocs: &m.allocs}
	a := z.Alloc
	const B = MaxBatch
	f := func(n int) cuda.DevicePtr { return a(4 * B * n) }
	bt.tokens, bt.zeroSel = a(4*B), a(4*B)
	bt.fixed = a(4 * B * len(m.layers) * max(g.k, 1))
	bt.slotSel = a(4 * B * max(g.k, 1))
	s := &bt.s
	s.x, s.u = f(g.H), f(g.H)
	s.proj, s.convOut, s.z, s.o = f(g.C), f(g.C), f(g.vd), f(max(g.vd, g.attn.Hq*g.attn.Dh))
	s.a, s.b = f(2*g.gdn.Hv), f(g.gdn.Hv)
	s.q2, s.k, s.v = f(2*g.attn.Hq*g.attn.Dh), f(g.kvd), f(g.kvd)
	s.router, s.sel, s.weight = f(g.E+1), f(max(g.k, 1)), f(max(g.k, 1))
	s.sg, s.su, s.gates = f(max(g.Is, 1)), f(max(g.Is, 1)), f(1)
	s.eg, s.eu, s.routed = f(max((g.k+1)*g.I, 1)), f(max((g.k+1)*g.I, 1)), f(max(g.k*g.H, 1))
	s.shared, s.g, s.up = f(g.H), f(max(g.Inter, 1)), f(max(g.Inter, 1))
	s.oraw = f(max(g.vd, 1))
	s.final, s.logits = f(g.H), f(g.V)
	widest := max(g.H, g.vd, g.attn.Hq*g.attn.Dh, g.Is, g.Inter, g.k*g.I)
	q8, q4, ds := gpukernels.QActBytes(B, widest)
	e8, e4, eds := gpukernels.QActBytes(B*(g.k+1), g.I) // moe_down's inputs: k+1 vectors a row
	s.qa = gpukernels.QAct{Q8: a(int(max(q8, e8))), Q4: a(int(max(q4, e4))), DX: a(int(max(ds, eds))), SX: a(int(max(ds, eds)))}
	if z.Err != nil {
		return nil, fmt.Errorf("gpu: no room for the batched step's scratch (%d rows): %w", B, z.Err)
	}
	m.batch = bt
	return bt, nil
}

// BatchScratchBytes is the device memory the batched step's scratch takes
// (made on the first batched step, beside the states).
func (m *Model) BatchScratchBytes() int64 {
	g := m.geom
	per := 2*g.H + 2*g.C + g.vd + max(g.vd, g.attn.Hq*g.attn.Dh) + 3*g.gdn.Hv + 2*g.attn.Hq*g.attn.Dh + 2*g.kvd +
		g.E + 1 + 2*max(g.k, 1) + 2*max(g.Is, 1) + 1 + 2*max((g.k+1)*g.I, 1) + max(g.k*g.H, 1) + g.H + 2*max(g.Inter, 1) + max(g.vd, 1) + g.H + g.V
	widest := max(g.H, g.vd, g.attn.Hq*g.attn.Dh, g.Is, g.Inter, g.k*g.I)
	q8, q4, ds := gpukernels.QActBytes(MaxBatch, widest)
	e8, e4, eds := gpukernels.QActBytes(MaxBatch*(g.k+1), g.I)
	fixed := 4 * MaxBatch * int64(len(m.layers)+1) * int64(max(g.k, 1)) // and slotSel
	return 4*MaxBatch*int64(per) + 8*MaxBatch + fixed + max(q8, e8) + max(q4, e4) + 2*max(ds, eds)
}

// statePtrs lists one state buffer of each row (of is which).
func (bt *batcher) statePtrs(sts []*State, of func(*State) cuda.DevicePtr) []cuda.DevicePtr {
	bt.ptrs = bt.ptrs[:0]
	for _, st := range sts {
		bt.ptrs = append(bt.ptrs, of(st))
	}
	return bt.ptrs
}

// attnRowsOf lists each row's attention state at layer i.
func (bt *batcher) attnRowsOf(sts []*State, i int) []gpukernels.AttnRow {
	bt.attn = bt.attn[:0]
	for _, st := range sts {
		bt.attn = append(bt.attn, gpukernels.AttnRow{KV: st.kv[i], Pos: st.dpos, Scores: st.s.scores, Capacity: st.kcap})
	}
	return bt.attn
}

// gemvRows launches GEMV over the N rows with the kernel a one-token step
// uses (qgemv or fgemv, one block row per token) even where GEMV would pick
// a prefill product for N > 1: a selection of expert 0 of a matrix with no
// expert stride (bt.zeroSel) addresses exactly the rows no selection does.
func gemvRows(l *gpukernels.Launcher, bt *batcher, y cuda.DevicePtr, w *gpukernels.Mat, x cuda.DevicePtr, q *gpukernels.QAct, res, sel cuda.DevicePtr, slots int, xslot bool, N int) error {
	if sel == 0 {
		if w.EData != 0 || w.EScale != 0 {
			return fmt.Errorf("gpu: batched step: an expert matrix without a selection")
		}
		sel = bt.zeroSel
	}
	return l.GEMV(y, w, x, q, res, sel, slots, xslot, N)
}

// forwardBatch is Model.forward for one token of each of sts, row r
// states[r]'s: the same launches a one-token step makes, the products over
// the N rows, the mixers on each row's own state.
func (m *Model) forwardBatch(l *gpukernels.Launcher, bt *batcher, sts []*State) error {
	g, s, N := m.geom, &bt.s, len(sts)
	var err error
	do := func(e error) {
		if err == nil {
			err = e
		}
	}
	row := func(p cuda.DevicePtr, r, width int) cuda.DevicePtr { return p + cuda.DevicePtr(4*r*width) }
	ops := &passOps{l: l, do: do, qa: &s.qa, x: s.x, u: s.u, H: g.H, eps: g.eps, rows: N, fused: m.fuse}
	gemv := func(x cuda.DevicePtr, vectors, cols int, outs []cuda.DevicePtr, ws []*gpukernels.Mat, res cuda.DevicePtr, sel cuda.DevicePtr, slots int, xslot bool) {
		ops.gemv(x, vectors, cols, outs, ws, func(out cuda.DevicePtr, w *gpukernels.Mat) {
			do(gemvRows(l, bt, out, w, x, &s.qa, res, sel, slots, xslot, N))
		})
	}
	multi, norm, swiglu, fused := ops.multi, ops.norm, ops.swiglu, ops.fused
	one := func(x cuda.DevicePtr, cols int, out cuda.DevicePtr, w *gpukernels.Mat, res cuda.DevicePtr) {
		gemv(x, N, cols, []cuda.DevicePtr{out}, []*gpukernels.Mat{w}, res, 0, 1, false)
	}
	split := m.splitGDN && gpukernels.GDNSplitFits(g.gdn, max(m.chunk, 1)) // State.chunkLen's
	hqd := g.attn.Hq * g.attn.Dh
	do(l.Embed(s.x, m.embed, bt.tokens, N))
	for i := range m.layers {
		ly := &m.layers[i]
		norm(ly.inNorm, ly.qkv, ly.z, ly.ab, ly.a, ly.b, ly.q, ly.k, ly.v)
		switch ly.kind {
		case qwen35.LinearAttention:
			a, b, abStride := s.a, s.b, g.gdn.Hv
			switch {
			case fused && ly.ab != nil:
				multi(s.u, g.H, gpukernels.Seg{Y: s.proj, M: ly.qkv}, gpukernels.Seg{Y: s.z, M: ly.z}, gpukernels.Seg{Y: s.a, M: ly.ab})
				b, abStride = s.a+cuda.DevicePtr(4*g.gdn.Hv), 2*g.gdn.Hv
			case fused:
				multi(s.u, g.H, gpukernels.Seg{Y: s.proj, M: ly.qkv}, gpukernels.Seg{Y: s.z, M: ly.z}, gpukernels.Seg{Y: s.b, M: ly.b}, gpukernels.Seg{Y: s.a, M: ly.a})
			case ly.ab != nil:
				gemv(s.u, N, g.H, []cuda.DevicePtr{s.proj, s.z, s.a}, []*gpukernels.Mat{ly.qkv, ly.z, ly.ab}, 0, 0, 1, false)
				b, abStride = s.a+cuda.DevicePtr(4*g.gdn.Hv), 2*g.gdn.Hv
			default:
				gemv(s.u, N, g.H, []cuda.DevicePtr{s.proj, s.z, s.b, s.a}, []*gpukernels.Mat{ly.qkv, ly.z, ly.b, ly.a}, 0, 0, 1, false)
			}
			if bt.rowLaunches {
				for r, st := range sts {
					do(l.GDNConv(row(s.convOut, r, g.C), row(s.proj, r, g.C), st.conv[i], ly.conv, g.C, g.K, 1))
				}
			} else {
				do(l.GDNConvRows(s.convOut, s.proj, bt.statePtrs(sts, func(st *State) cuda.DevicePtr { return st.conv[i] }), ly.conv, g.C, g.K))
			}
			if split {
				batched := false
				if !bt.rowLaunches {
					var e error
					batched, e = l.GDNRecRows(s.oraw, bt.statePtrs(sts, func(st *State) cuda.DevicePtr { return st.rec[i] }), s.convOut, a, b, ly.negExpA, ly.dtBias, g.gdn, abStride)
					do(e)
				}
				for r, st := range sts {
					if batched {
						break
					}
					do(l.GDNRec(row(s.oraw, r, g.vd), st.rec[i], row(s.convOut, r, g.C), row(a, r, abStride), row(b, r, abStride), ly.negExpA, ly.dtBias, g.gdn, 1, abStride))
				}
				// gdn_norm is a block per (head, token) over its state-free rows.
				if ly.out.Quantized() && g.gdn.Dv%64 == 0 {
					do(l.GDNNorm(s.o, s.oraw, s.z, ly.gdnNorm, g.gdn, g.eps, N, &s.qa))
					ops.held = quantized{s.o, N, g.vd}
				} else {
					do(l.GDNNorm(s.o, s.oraw, s.z, ly.gdnNorm, g.gdn, g.eps, N, nil))
					ops.held = quantized{}
				}
			} else {
				for r, st := range sts {
					do(l.GDNHeads(row(s.o, r, g.vd), st.rec[i], row(s.convOut, r, g.C), row(s.z, r, g.vd), row(a, r, abStride), row(b, r, abStride),
						ly.negExpA, ly.dtBias, ly.gdnNorm, g.gdn, g.eps, 1, abStride))
				}
			}
			one(s.o, g.vd, s.x, ly.out, s.x)
		case qwen35.FullAttention:
			if fused {
				multi(s.u, g.H, gpukernels.Seg{Y: s.q2, M: ly.q}, gpukernels.Seg{Y: s.k, M: ly.k}, gpukernels.Seg{Y: s.v, M: ly.v})
			} else {
				gemv(s.u, N, g.H, []cuda.DevicePtr{s.q2, s.k, s.v}, []*gpukernels.Mat{ly.q, ly.k, ly.v}, 0, 0, 1, false)
			}
			if rows := bt.attnRowsOf(sts, i); !bt.rowLaunches && gpukernels.AttnRowsFit(rows) {
				do(l.AttnKVRows(s.k, s.v, ly.kNorm, m.invFreq, rows, g.attn, g.eps))
				do(l.AttnHeadsRows(s.o, s.q2, ly.qNorm, m.invFreq, rows, g.attn, g.eps))
			} else {
				for r, st := range sts {
					do(l.AttnKV(st.kv[i], row(s.k, r, g.kvd), row(s.v, r, g.kvd), ly.kNorm, m.invFreq, st.dpos, g.attn, g.eps, 1))
					do(l.AttnHeads(row(s.o, r, hqd), st.s.scores, row(s.q2, r, 2*hqd), st.kv[i], ly.qNorm, m.invFreq, st.dpos, g.attn, g.eps, st.kcap, 1))
				}
			}
			one(s.o, hqd, s.x, ly.o, s.x)
		}
		norm(ly.postNorm, ly.routerG, ly.router, ly.sGate, ly.sUp, ly.sharedG, ly.eGate, ly.eUp, ly.gate, ly.up)
		switch {
		case ly.router != nil && fused && ly.moeFused:
			m.moeStepBatch(l, bt, sts, i, multi, do)
			ops.held = quantized{}
		case ly.router != nil:
			gates, stride, gstride := s.gates, g.E, 1
			if ly.routerG != nil {
				gemv(s.u, N, g.H, []cuda.DevicePtr{s.router, s.sg, s.su}, []*gpukernels.Mat{ly.routerG, ly.sGate, ly.sUp}, 0, 0, 1, false)
				gates, stride, gstride = s.router+cuda.DevicePtr(4*g.E), g.E+1, g.E+1
			} else {
				gemv(s.u, N, g.H, []cuda.DevicePtr{s.router, s.sg, s.su, s.gates}, []*gpukernels.Mat{ly.router, ly.sGate, ly.sUp, ly.sharedG}, 0, 0, 1, false)
			}
			do(m.routeBatch(l, bt, sts, i, stride))
			eGate, eUp, eDown, sel := m.batchExperts(l, bt, ly, N, do)
			gemv(s.u, N, g.H, []cuda.DevicePtr{s.eg, s.eu}, []*gpukernels.Mat{eGate, eUp}, 0, sel, g.k, false)
			swiglu(s.sg, s.su, N, g.Is, ly.sDown)
			one(s.sg, g.Is, s.shared, ly.sDown, 0)
			swiglu(s.eg, s.eu, N*g.k, g.I, eDown)
			gemv(s.eg, N*g.k, g.I, []cuda.DevicePtr{s.routed}, []*gpukernels.Mat{eDown}, 0, sel, g.k, true)
			do(l.Combine(s.x, s.routed, s.weight, s.shared, gates, g.k, g.H, N, gstride))
		default:
			gemv(s.u, N, g.H, []cuda.DevicePtr{s.g, s.up}, []*gpukernels.Mat{ly.gate, ly.up}, 0, 0, 1, false)
			swiglu(s.g, s.up, N, g.Inter, ly.down)
			one(s.g, g.Inter, s.x, ly.down, s.x)
		}
	}
	ops.unfold() // none is left: every layer's norm has its multi
	// lm_head over the N rows at once, then each row into its state's own
	// logits, greedy pick and position (one head_rows launch), where
	// Logits, Argmax and Sample read them.
	if m.lmHead.Quantized() {
		do(l.RMSNormQuantize(&s.qa, s.final, s.x, m.norm, g.H, N, g.eps))
	} else {
		do(l.RMSNorm(s.final, s.x, m.norm, g.H, N, g.eps))
	}
	do(gemvRows(l, bt, s.logits, m.lmHead, s.final, &s.qa, 0, 0, 1, false, N))
	if !bt.rowLaunches { // one launch: head_rows
		dst, next, pos := make([]cuda.DevicePtr, N), make([]cuda.DevicePtr, N), make([]cuda.DevicePtr, N)
		for r, st := range sts {
			dst[r], next[r], pos[r] = st.s.logits, st.next, st.dpos
		}
		do(l.HeadRows(s.logits, g.V, dst, next, pos))
		return err
	}
	// argmax reads the batch's row, not the copy: the copy is no kernel, so
	// no programmatic dependent launch hangs on it.
	for r, st := range sts {
		do(l.Argmax(st.next, row(s.logits, r, g.V), g.V))
		do(l.C.DtoD(st.s.logits, row(s.logits, r, g.V), uint64(4*g.V)))
		do(l.Advance(st.dpos, 1))
	}
	return err
}

// moeStepBatch is moeStep over the N rows: the shared expert's gate and
// up land in slot k of each row's k+1 (YTok), moe_down's layout for T
// tokens.
func (m *Model) moeStepBatch(l *gpukernels.Launcher, bt *batcher, sts []*State, layer int, multi func(cuda.DevicePtr, int, ...gpukernels.Seg), do func(error)) {
	g, s, N, ly := m.geom, &bt.s, len(sts), &m.layers[layer]
	per := (g.k + 1) * g.I
	sg, su := s.eg+cuda.DevicePtr(4*g.k*g.I), s.eu+cuda.DevicePtr(4*g.k*g.I)
	gates, stride, gstride := s.gates, g.E, 1
	if ly.routerG != nil {
		multi(s.u, g.H, gpukernels.Seg{Y: s.router, M: ly.routerG}, gpukernels.Seg{Y: sg, M: ly.sGate, YTok: per}, gpukernels.Seg{Y: su, M: ly.sUp, YTok: per})
		gates, stride, gstride = s.router+cuda.DevicePtr(4*g.E), g.E+1, g.E+1
	} else {
		multi(s.u, g.H, gpukernels.Seg{Y: s.router, M: ly.router}, gpukernels.Seg{Y: s.gates, M: ly.sharedG},
			gpukernels.Seg{Y: sg, M: ly.sGate, YTok: per}, gpukernels.Seg{Y: su, M: ly.sUp, YTok: per})
	}
	do(m.routeBatch(l, bt, sts, layer, stride))
	eGate, eUp, eDown, sel := m.batchExperts(l, bt, ly, N, do)
	multi(s.u, g.H, gpukernels.Seg{Y: s.eg, M: eGate, Sel: sel, Slots: g.k, YTok: per}, gpukernels.Seg{Y: s.eu, M: eUp, Sel: sel, Slots: g.k, YTok: per})
	do(l.SwiGLUQuantize(&s.qa, s.eg, s.eu, N*(g.k+1), g.I))
	do(l.MoEDown(s.x, eDown, ly.sDown, &s.qa, sel, s.weight, gates, g.k, gstride, N))
}

// routeBatch routes the N rows of layer: one launch when no row replays
// or every row does (from bt.fixed); else row by row, each replaying row
// from its own state's ids (stageRoutes with T = 1 lays them [layer][k]).
// route is a block per token, so a row's pick is the same either way.
func (m *Model) routeBatch(l *gpukernels.Launcher, bt *batcher, sts []*State, layer, stride int) error {
	s, g := &bt.s, m.geom
	replays := false
	for _, st := range sts {
		replays = replays || st.replay.o != nil
	}
	if !replays {
		return l.Route(s.sel, s.weight, s.router, g.E, g.k, len(sts), stride)
	}
	if N := len(sts); allReplay(sts) { // stageBatchRoutes laid them [layer][row][k]
		return l.RouteFixed(s.sel, s.weight, s.router, bt.fixed+cuda.DevicePtr(4*layer*N*g.k), g.E, g.k, N, stride)
	}
	for r, st := range sts {
		sel, w, logits := s.sel+cuda.DevicePtr(4*r*g.k), s.weight+cuda.DevicePtr(4*r*g.k), s.router+cuda.DevicePtr(4*r*stride)
		var err error
		if st.replay.o == nil {
			err = l.Route(sel, w, logits, g.E, g.k, 1, stride)
		} else {
			err = l.RouteFixed(sel, w, logits, st.replay.ids+cuda.DevicePtr(4*layer*g.k), g.E, g.k, 1, stride)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// batchExperts is routedExperts for the N rows: resident experts as they
// are. A streamed layer whose slots hold every row's picks at once
// (S ≥ N·k) resolves each row's picks to slots as a decode step does
// (slot_resolve, then slot_fill for its misses), row after row into
// bt.slotSel [N][k]: each resolve takes its misses' slots from the least
// recently used, and the earlier rows' slots are this step's most recent,
// so no row evicts another's pick; the products then gather from the pool
// and the slots learn the batch's experts. With fewer slots the batch's
// experts are staged by id as a prefill pass stages them (the slot tables
// only read). The same bytes either way.
func (m *Model) batchExperts(l *gpukernels.Launcher, bt *batcher, ly *layerW, N int, do func(error)) (gate, up, down *gpukernels.Mat, sel cuda.DevicePtr) {
	s, sl := &bt.s, ly.stream
	if sl == nil {
		return ly.eGate, ly.eUp, ly.eDown, s.sel
	}
	g, x := m.geom, m.stream
	if x.slots >= N*g.k && !bt.stageStreamed {
		for r := range N {
			off := cuda.DevicePtr(4 * r * g.k)
			do(l.SlotResolve(bt.slotSel+off, sl.tab, sl.stats, s.sel+off, g.E, x.slots, g.k, x.stride))
			do(l.SlotFill(sl.pool, sl.hostDev, sl.tab, g.E, x.slots, g.k, x.stride, x.noCopy))
		}
		return sl.gate, sl.up, sl.down, bt.slotSel
	}
	do(l.ExpertNeed(x.need, s.sel, N*g.k, g.E))
	do(l.ExpertStage(x.staging, sl.pool, sl.hostDev, x.need, sl.tab, sl.stats, g.E, x.stride))
	return ly.eGate, ly.eUp, ly.eDown, s.sel
}

// SequenceRoom sizes serve --parallel on the device: per is one sequence
// state's device memory at the plan's context (stateBytes, as the plan
// counts the one it reserves: the KV cache grows past it on demand), room
// the device memory free now less the auto budget's reserve and, until the
// first batched step makes it, the batched step's scratch. No state is
// allocated at load, so room/per states fit, the first included.
func (b *Backend) SequenceRoom() (per, room int64, err error) {
	m := b.Model
	ctx := m.opt.MaxContext
	if ctx <= 0 {
		ctx = DefaultPlanContext
	}
	per = stateBytes(m.cfg, m.geom, max(m.chunk, 1), min(ctx, m.cfg.MaxContext), m.kvBits())
	err = m.dev.Do(func(c *cuda.Ctx) error { // m.batch is the device goroutine's
		free, total, err := c.MemInfo()
		room = int64(free) - autoReserve(total)
		if m.batch == nil {
			room -= m.BatchScratchBytes()
		}
		return err
	})
	if err != nil {
		return per, 0, err
	}
	return per, max(room, 0), nil
}
