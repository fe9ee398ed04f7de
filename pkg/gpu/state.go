package gpu

import (
	"cmp"
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/sample"
)

// Phases of a decode step, as BenchInfo splits it.
const (
	PhaseEmbed     = "embed"
	PhaseGDN       = "gdn"       // norm, projections, conv, delta rule, out projection
	PhaseAttention = "attention" // norm, projections, KV, attention, out projection
	PhaseMoE       = "moe"       // norm, router, shared and routed experts, combine
	PhaseMLP       = "mlp"
	PhaseHead      = "lm_head" // final norm, lm_head, argmax
)

// DefaultChunk is the most tokens one forward pass carries by default
// (prefill chunks; NVMAI_GPU_CHUNK sets it, up to MaxChunkLimit). 512
// rather than 256 gives each grouped expert twice the rows (2,410 → 2,708
// tok/s for a 512-token prompt on the H200, docs/gpu.md); the attention
// scores scratch is 4·chunk·Hq·KV-capacity bytes.
const DefaultChunk = 512

// MaxChunkLimit is the longest prefill chunk NVMAI_GPU_CHUNK may ask for.
const MaxChunkLimit = 1024

// StateOptions size a sequence's KV cache.
type StateOptions struct {
	KVInitial  int // starting capacity in tokens (default 1024); doubles on demand
	MaxContext int // default the model's maximum
	// KVBits is the KV cache's width: model.KVFloat32, KVBF16 or KVInt8,
	// stored as the CPU engine stores it (docs/kv-cache.md). 0 means
	// float32, as qwen35.StateOptions; the runtime's sessions pass
	// model.DefaultKVBits (Backend.NewState).
	KVBits  int
	NoGraph bool
}

// State is one sequence on the device: recurrent and conv state, the KV
// cache and the scratch of a forward pass. Decode steps replay one captured
// CUDA graph per KV capacity; the position lives in device memory.
type State struct {
	m            *Model
	pos          int // host mirror of *dpos
	chunkLen     int // prefill tokens per pass (Model.chunk when allocated)
	maxCtx, kcap int
	kvBits       int
	noGraph      bool

	dpos, tokens, next cuda.DevicePtr
	cand               cuda.DevicePtr       // topk_cand's header and (id, logit) pairs
	samp               devshared.Sampler    // sampling on the device
	conv, rec          []cuda.DevicePtr     // per layer (GDN layers only)
	kv                 []gpukernels.KVCache // per layer (attention layers only)
	s                  scratch
	graph              *cuda.Graph
	graphKernels       int
	failed             error
	allocs             []cuda.DevicePtr // everything but the KV cache
	replay             routeReplay      // SetRouteOverride's experts (route.go)
	gen                uint64           // numbers the KV buffers, which batch graphs bake in (batch.go)
}

// scratch is a forward pass's device buffers for up to State.chunkLen tokens.
type scratch struct {
	x, u, proj, convOut, z, a, b, o    cuda.DevicePtr
	q2, k, v, scores                   cuda.DevicePtr
	router, sel, weight, sg, su, gates cuda.DevicePtr
	eg, eu, routed, shared, g, up      cuda.DevicePtr
	offs, list                         cuda.DevicePtr // prefill's entries by expert (moe_group)
	oraw                               cuda.DevicePtr // gdn_rec's outputs before the gated norm
	final, logits                      cuda.DevicePtr
	qa                                 gpukernels.QAct
}

// NewState allocates a sequence.
func (m *Model) NewState(opt StateOptions) (*State, error) {
	cfg := m.cfg
	st := &State{m: m, maxCtx: opt.MaxContext, noGraph: opt.NoGraph, chunkLen: max(m.chunk, 1), kvBits: cmp.Or(opt.KVBits, model.KVFloat32)}
	if !model.ValidKVBits(st.kvBits) {
		return nil, fmt.Errorf("gpu: a KV cache of %d bits; use 8, 16 or 32", opt.KVBits)
	}
	if st.maxCtx <= 0 || st.maxCtx > cfg.MaxContext {
		st.maxCtx = cfg.MaxContext
	}
	st.kcap = opt.KVInitial
	if st.kcap <= 0 {
		st.kcap = 1024
	}
	st.kcap = min(st.kcap, st.maxCtx)
	err := m.dev.Do(func(c *cuda.Ctx) error { return st.alloc(c) })
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func (st *State) alloc(c *cuda.Ctx) error {
	g, cfg := st.m.geom, st.m.cfg
	z := &devshared.Zeroed{C: c, Allocs: &st.allocs}
	a := z.Alloc
	T := st.chunkLen
	f := func(n int) cuda.DevicePtr { return a(4 * T * n) }
	st.dpos, st.tokens, st.next = a(4), a(4*T), a(4)
	st.cand = a(4 * (4 + 2*MaxCandidates))
	st.conv = make([]cuda.DevicePtr, len(cfg.Layers))
	st.rec = make([]cuda.DevicePtr, len(cfg.Layers))
	st.kv = make([]gpukernels.KVCache, len(cfg.Layers))
	for l, kind := range cfg.Layers {
		if kind == qwen35.LinearAttention {
			st.conv[l] = a(4 * (g.K - 1) * g.C)
			st.rec[l] = a(4 * g.gdn.Hv * g.gdn.Dk * g.gdn.Dv)
		}
	}
	s := &st.s
	s.x, s.u = f(g.H), f(g.H)
	s.proj, s.convOut, s.z, s.o = f(g.C), f(g.C), f(g.vd), f(max(g.vd, g.attn.Hq*g.attn.Dh))
	s.a, s.b = f(2*g.gdn.Hv), f(g.gdn.Hv)
	s.q2, s.k, s.v = f(2*g.attn.Hq*g.attn.Dh), f(g.kvd), f(g.kvd)
	s.router, s.sel, s.weight = f(g.E+1), f(max(g.k, 1)), f(max(g.k, 1))
	s.sg, s.su, s.gates = f(max(g.Is, 1)), f(max(g.Is, 1)), f(1)
	s.eg, s.eu, s.routed = f(max(g.k*g.I, 1)), f(max(g.k*g.I, 1)), f(max(g.k*g.H, 1))
	s.shared, s.g, s.up = f(g.H), f(max(g.Inter, 1)), f(max(g.Inter, 1))
	s.offs, s.list = a(4*(g.E+1)), f(max(g.k, 1))
	s.oraw = f(max(g.vd, 1))
	s.final, s.logits = a(4*g.H), a(4*g.V)
	widest := max(g.H, g.vd, g.attn.Hq*g.attn.Dh, g.Is, g.Inter, g.k*g.I)
	q8, q4, ds := gpukernels.QActBytes(T, widest)
	s.qa = gpukernels.QAct{Q8: a(int(q8)), Q4: a(int(q4)), DX: a(int(ds)), SX: a(int(ds))}
	if z.Err != nil {
		return fmt.Errorf("gpu: allocating a sequence: %w", z.Err)
	}
	return st.allocKV(c, st.kcap, 0)
}

// allocKV gives every attention layer a cache of capacity tokens at the
// state's width, keeping the first keep tokens (values and scales), and
// sizes the score scratch to match.
func (st *State) allocKV(c *cuda.Ctx, capacity, keep int) error {
	st.gen = nextStateGen() // first: a growth that fails half-way has replaced some buffers
	g, cfg := st.m.geom, st.m.cfg
	values, scales := gpukernels.KVRowBytes(st.kvBits, g.kvd, g.attn.Dh)
	for l, kind := range cfg.Layers {
		if kind != qwen35.FullAttention {
			continue
		}
		kv := &st.kv[l]
		kv.Bits = st.kvBits
		for _, b := range []struct {
			buf *cuda.DevicePtr
			row int64
		}{{&kv.K, values}, {&kv.V, values}, {&kv.KS, scales}, {&kv.VS, scales}} {
			if b.row == 0 {
				continue
			}
			if err := devshared.GrowRows(c, b.buf, b.row, capacity, keep, func(err error) error {
				return fmt.Errorf("gpu: no room for a %d-bit KV cache of %d tokens: %w", st.kvBits, capacity, err)
			}); err != nil {
				return err
			}
		}
	}
	if st.s.scores != 0 {
		c.Free(st.s.scores)
	}
	p, err := c.Alloc(uint64(4 * st.chunkLen * max(g.attn.Hq, 1) * capacity))
	if err != nil {
		return fmt.Errorf("gpu: no room for attention scores over %d tokens: %w", capacity, err)
	}
	st.s.scores = p
	if st.graph != nil { // captured with the old buffers
		c.DestroyGraph(st.graph)
		st.graph = nil
	}
	st.kcap = capacity
	return nil
}

// Close frees the sequence's device memory.
func (st *State) Close() {
	st.m.dev.Do(func(c *cuda.Ctx) error {
		c.DestroyGraph(st.graph)
		st.graph = nil
		for _, p := range st.allocs {
			c.Free(p)
		}
		for _, kv := range st.kv {
			for _, p := range []cuda.DevicePtr{kv.K, kv.V, kv.KS, kv.VS} {
				if p != 0 {
					c.Free(p)
				}
			}
		}
		if st.s.scores != 0 {
			c.Free(st.s.scores)
		}
		return nil
	})
	st.allocs = nil
}

// Len is the number of tokens the sequence holds.
func (st *State) Len() int { return st.pos }

// KVBits implements model.KVWidth: the KV cache's width.
func (st *State) KVBits() int { return st.kvBits }

// MaxContext is the most tokens the sequence may hold.
func (st *State) MaxContext() int { return st.maxCtx }

// GraphKernels is the number of kernels in the decode graph (0 before the
// first decode step or without graphs).
func (st *State) GraphKernels() int { return st.graphKernels }

// Forward feeds ids; afterwards the last token's logits and greedy pick are
// on the device (Logits, Argmax).
func (st *State) Forward(ids []int) error {
	return devshared.Forward("gpu", st.m.dev, &st.failed, ids, st.m.geom.V, st.pos, st.kcap, st.maxCtx, st.chunkLen, st.allocKV, st.chunk)
}

func (st *State) chunk(c *cuda.Ctx, ids []int) error {
	tok := make([]int32, len(ids))
	for i, id := range ids {
		tok[i] = int32(id)
	}
	// Async: pageable memory is staged at the call, and the stream orders
	// the copy after the previous step's kernels, which read the old ids.
	if err := c.HtoDAsync(st.tokens, cuda.Bytes(tok)); err != nil {
		return err
	}
	if err := st.stageRoutes(c, len(ids)); err != nil {
		return err
	}
	l := &gpukernels.Launcher{C: c, K: st.m.ks, MMA: st.m.mma, GDNPipe: st.m.gdnPipe, GDNPar: st.m.gdnPar, GDNReg: st.m.gdnReg}
	if len(ids) == 1 && !st.noGraph && !st.m.hostPlanned() { // host-planned: the host works between layers (streamhost.go)
		if st.graph == nil {
			if err := c.BeginCapture(); err != nil {
				return err
			}
			ferr := st.m.forward(l, st, 1, nil)
			g, err := c.EndCapture()
			if ferr != nil {
				return ferr
			}
			if err != nil {
				return err
			}
			st.graph, st.graphKernels = g, l.Count
		}
		if err := c.LaunchGraph(st.graph); err != nil {
			return err
		}
	} else if err := st.m.forward(l, st, len(ids), nil); err != nil {
		return err
	}
	st.pos += len(ids)
	return nil
}

// Logits copies the last token's logits into dst [V].
func (st *State) Logits(dst []float32) error {
	if len(dst) != st.m.geom.V {
		return fmt.Errorf("gpu: Logits: %d values, want vocab %d", len(dst), st.m.geom.V)
	}
	return st.m.dev.Do(func(c *cuda.Ctx) error { return c.DtoH(cuda.Bytes(dst), st.s.logits) })
}

// Argmax returns the greedy next token (computed on the device after the
// last Forward: the lowest id among equal maxima, an error on NaN logits).
func (st *State) Argmax() (int, error) {
	var id [1]int32
	if err := st.m.dev.Do(func(c *cuda.Ctx) error { return c.DtoH(cuda.Bytes(id[:]), st.next) }); err != nil {
		return 0, err
	}
	if id[0] < 0 {
		return 0, fmt.Errorf("gpu: the logits hold a NaN: the forward pass is broken")
	}
	return int(id[0]), nil
}

// MaxCandidates is the most top-k candidates samp_cand takes (ties with
// the k-th included); a row with more is sampled on the host.
const MaxCandidates = devshared.MaxCandidates

// Sample picks st's token from the last logits on the device
// (devshared.Sampler.Sample): ok is false when the host must take the row.
func (st *State) Sample(step sample.Step, history []int32) (id int, ok bool, err error) {
	return st.samp.Sample(st.m.dev, st.m.ks, st.m.geom.V, &st.allocs, st.cand, st.s.logits, st.next, step, history)
}

// forward enqueues the whole decoder for T tokens at the device position:
// the same launches whether captured into a graph or run directly.
func (m *Model) forward(l *gpukernels.Launcher, st *State, T int, mark func(phase string)) error {
	if mark == nil {
		mark = func(string) {}
	}
	g, s := m.geom, &st.s
	var err error
	do := func(e error) {
		if err == nil {
			err = e
		}
	}
	ops := &passOps{l: l, do: do, qa: &s.qa, x: s.x, u: s.u, H: g.H, eps: g.eps, rows: T, fused: T == 1 && m.fuse}
	grouped := false // the layer's MoEGroup ran: gathered products go expert by expert
	// gemv quantizes x into the scratch (when any of ws is quantized) and
	// multiplies every w of ws by it.
	gemv := func(x cuda.DevicePtr, vectors, cols int, outs []cuda.DevicePtr, ws []*gpukernels.Mat, res cuda.DevicePtr, sel cuda.DevicePtr, slots int, xslot bool) {
		ops.gemv(x, vectors, cols, outs, ws, func(out cuda.DevicePtr, w *gpukernels.Mat) {
			if sel != 0 && T > 1 && grouped && w.Quantized() { // prefill: expert by expert (MoEGroup ran)
				do(l.GEMVGrouped(out, w, &s.qa, s.offs, s.list, slots, g.E, xslot))
				return
			}
			do(l.GEMV(out, w, x, &s.qa, res, sel, slots, xslot, T))
		})
	}
	multi, norm, swiglu, fused := ops.multi, ops.norm, ops.swiglu, ops.fused
	one := func(x cuda.DevicePtr, cols int, out cuda.DevicePtr, w *gpukernels.Mat, res cuda.DevicePtr) {
		gemv(x, T, cols, []cuda.DevicePtr{out}, []*gpukernels.Mat{w}, res, 0, 1, false)
	}
	do(l.Embed(s.x, m.embed, st.tokens, T))
	mark(PhaseEmbed)
	for i := range m.layers {
		ly := &m.layers[i]
		if T == 1 && m.readAhead(l, st, i, do) { // streamed layers' guessed experts copy beside the layers before them (streamahead.go)
			mark(PhaseMoE)
		}
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
			case ly.ab != nil: // one product gives a then b per token
				gemv(s.u, T, g.H, []cuda.DevicePtr{s.proj, s.z, s.a}, []*gpukernels.Mat{ly.qkv, ly.z, ly.ab}, 0, 0, 1, false)
				b, abStride = s.a+cuda.DevicePtr(4*g.gdn.Hv), 2*g.gdn.Hv
			default:
				gemv(s.u, T, g.H, []cuda.DevicePtr{s.proj, s.z, s.b, s.a}, []*gpukernels.Mat{ly.qkv, ly.z, ly.b, ly.a}, 0, 0, 1, false)
			}
			do(l.GDNConv(s.convOut, s.proj, st.conv[i], ly.conv, g.C, g.K, T))
			if m.splitGDN && gpukernels.GDNSplitFits(g.gdn, st.chunkLen) {
				do(l.GDNRec(s.oraw, st.rec[i], s.convOut, a, b, ly.negExpA, ly.dtBias, g.gdn, T, abStride))
				if ly.out.Quantized() && g.gdn.Dv%64 == 0 { // the out projection's input quantized in the same launch
					do(l.GDNNorm(s.o, s.oraw, s.z, ly.gdnNorm, g.gdn, g.eps, T, &s.qa))
					ops.held = quantized{s.o, T, g.vd}
				} else {
					do(l.GDNNorm(s.o, s.oraw, s.z, ly.gdnNorm, g.gdn, g.eps, T, nil))
					ops.held = quantized{}
				}
			} else {
				do(l.GDNHeads(s.o, st.rec[i], s.convOut, s.z, a, b, ly.negExpA, ly.dtBias, ly.gdnNorm, g.gdn, g.eps, T, abStride))
			}
			one(s.o, g.vd, s.x, ly.out, s.x)
			mark(PhaseGDN)
		case qwen35.FullAttention:
			if fused {
				multi(s.u, g.H, gpukernels.Seg{Y: s.q2, M: ly.q}, gpukernels.Seg{Y: s.k, M: ly.k}, gpukernels.Seg{Y: s.v, M: ly.v})
			} else {
				gemv(s.u, T, g.H, []cuda.DevicePtr{s.q2, s.k, s.v}, []*gpukernels.Mat{ly.q, ly.k, ly.v}, 0, 0, 1, false)
			}
			do(l.AttnKV(st.kv[i], s.k, s.v, ly.kNorm, m.invFreq, st.dpos, g.attn, g.eps, T))
			do(l.AttnHeads(s.o, s.scores, s.q2, st.kv[i], ly.qNorm, m.invFreq, st.dpos, g.attn, g.eps, st.kcap, T))
			one(s.o, g.attn.Hq*g.attn.Dh, s.x, ly.o, s.x)
			mark(PhaseAttention)
		}
		norm(ly.postNorm, ly.routerG, ly.router, ly.sGate, ly.sUp, ly.sharedG, ly.eGate, ly.eUp, ly.gate, ly.up)
		if ly.router != nil && fused && ly.moeFused {
			m.moeStep(l, st, ly, multi, do)
			ops.held = quantized{} // moeStep leaves the experts' activations quantized
			mark(PhaseMoE)
		} else if ly.router != nil {
			gates, stride, gstride := s.gates, g.E, 1
			if ly.routerG != nil { // one product gives the router logits then the gate
				gemv(s.u, T, g.H, []cuda.DevicePtr{s.router, s.sg, s.su}, []*gpukernels.Mat{ly.routerG, ly.sGate, ly.sUp}, 0, 0, 1, false)
				gates, stride, gstride = s.router+cuda.DevicePtr(4*g.E), g.E+1, g.E+1
			} else {
				gemv(s.u, T, g.H, []cuda.DevicePtr{s.router, s.sg, s.su, s.gates}, []*gpukernels.Mat{ly.router, ly.sGate, ly.sUp, ly.sharedG}, 0, 0, 1, false)
			}
			do(m.route(l, st, ly, T, stride))
			eGate, eUp, eDown, sel := m.routedExperts(l, st, ly, T, do)
			grouped = T > 1 && m.group && ly.moeGrouped
			if grouped {
				do(l.MoEGroup(s.offs, s.list, s.sel, T*g.k, g.E))
			}
			gemv(s.u, T, g.H, []cuda.DevicePtr{s.eg, s.eu}, []*gpukernels.Mat{eGate, eUp}, 0, sel, g.k, false)
			swiglu(s.sg, s.su, T, g.Is, ly.sDown)
			one(s.sg, g.Is, s.shared, ly.sDown, 0)
			swiglu(s.eg, s.eu, T*g.k, g.I, eDown)
			gemv(s.eg, T*g.k, g.I, []cuda.DevicePtr{s.routed}, []*gpukernels.Mat{eDown}, 0, sel, g.k, true)
			do(l.Combine(s.x, s.routed, s.weight, s.shared, gates, g.k, g.H, T, gstride))
			mark(PhaseMoE)
		} else {
			gemv(s.u, T, g.H, []cuda.DevicePtr{s.g, s.up}, []*gpukernels.Mat{ly.gate, ly.up}, 0, 0, 1, false)
			swiglu(s.g, s.up, T, g.Inter, ly.down)
			one(s.g, g.Inter, s.x, ly.down, s.x)
			mark(PhaseMLP)
		}
	}
	ops.unfold() // a norm no product read (none does: every layer's norm has its multi)
	m.finishAhead(l, do)
	last := s.x + cuda.DevicePtr(4*(T-1)*g.H)
	// lm_head reads one row: run it as a one-token GEMV.
	if m.lmHead.Quantized() {
		do(l.RMSNormQuantize(&s.qa, s.final, last, m.norm, g.H, 1, g.eps))
	} else {
		do(l.RMSNorm(s.final, last, m.norm, g.H, 1, g.eps))
	}
	do(l.GEMV(s.logits, m.lmHead, s.final, &s.qa, 0, 0, 1, false, 1))
	do(l.Argmax(st.next, s.logits, g.V))
	do(l.Advance(st.dpos, T))
	mark(PhaseHead)
	return err
}

// moeStep is a decode step's MoE block in four launches: the router (with
// the shared expert's gate logit) and the shared expert's gate and up in
// one, routing, the picked experts' gate and up in one (the shared
// expert's activation sits in slot k after the routed ones'), SwiGLU with
// quantization over the k+1 slots, and moe_down (down products and
// combine, into x). Bitwise the unfused path.
func (m *Model) moeStep(l *gpukernels.Launcher, st *State, ly *layerW, multi func(cuda.DevicePtr, int, ...gpukernels.Seg), do func(error)) {
	g, s := m.geom, &st.s
	sg, su := s.eg+cuda.DevicePtr(4*g.k*g.I), s.eu+cuda.DevicePtr(4*g.k*g.I)
	gates, stride, gstride := s.gates, g.E, 1
	if ly.routerG != nil { // the router logits then the gate
		multi(s.u, g.H, gpukernels.Seg{Y: s.router, M: ly.routerG}, gpukernels.Seg{Y: sg, M: ly.sGate}, gpukernels.Seg{Y: su, M: ly.sUp})
		gates, stride, gstride = s.router+cuda.DevicePtr(4*g.E), g.E+1, g.E+1
	} else {
		multi(s.u, g.H, gpukernels.Seg{Y: s.router, M: ly.router}, gpukernels.Seg{Y: s.gates, M: ly.sharedG},
			gpukernels.Seg{Y: sg, M: ly.sGate}, gpukernels.Seg{Y: su, M: ly.sUp})
	}
	do(m.route(l, st, ly, 1, stride))
	eGate, eUp, eDown, sel := m.routedExperts(l, st, ly, 1, do) // a streamed layer's slots
	multi(s.u, g.H, gpukernels.Seg{Y: s.eg, M: eGate, Sel: sel, Slots: g.k}, gpukernels.Seg{Y: s.eu, M: eUp, Sel: sel, Slots: g.k})
	do(l.SwiGLUQuantize(&s.qa, s.eg, s.eu, g.k+1, g.I))
	do(l.MoEDown(s.x, eDown, ly.sDown, &s.qa, sel, s.weight, gates, g.k, gstride, 1))
}
