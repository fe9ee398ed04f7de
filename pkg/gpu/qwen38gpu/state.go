package qwen38gpu

import (
	"cmp"
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
)

// StateOptions size a sequence.
type StateOptions struct {
	KVInitial  int // starting KV capacity in tokens (default 1024); doubles on demand
	MaxContext int // default the model's maximum
	// KVBits is the K and V width: model.KVFloat32, KVBF16 or KVInt8,
	// stored as gpukernels.AttnKV stores them (the CPU engine's bytes); 0
	// means float32. The indexer's keys are float32 at every width.
	KVBits int
	// NoGraph launches a decode step's kernels one by one instead of
	// replaying its CUDA graph (the comparison the tests make; also
	// NVMAI_GPU_GRAPH=0).
	NoGraph bool
}

// State is one sequence on the device: GDN conv and recurrent state, the
// KV cache, the indexer's raw and block keys, the PLE conv windows, and a
// pass's scratch. The n-gram histories live on the host (qwen38's hasher),
// which computes each pass's table rows from the token ids alone.
//
// A decode step is one CUDA graph replay: its n-gram rows are read on the
// host and copied into fixed device buffers (one per PLE layer) ahead of
// the replay, and every kernel reads the position from device memory
// (dpos). One graph is captured per attention mode (dense window or
// sparse, which the position decides on the host) and per KV capacity.
// Host-planned streamed experts (stream.go) launch decode steps kernel by
// kernel instead: the host works between layers.
type State struct {
	m                    *Model
	pos                  int
	maxCtx, kcap, kvBits int
	chunkLen             int
	noGraph              bool
	graphs               [2]*cuda.Graph // decode graphs: dense, sparse attention
	graphKernels         int

	dpos, tokens, next cuda.DevicePtr
	cand               cuda.DevicePtr
	samp               devshared.Sampler    // sampling on the device
	conv, rec          []cuda.DevicePtr     // per layer (GDN layers)
	kv                 []gpukernels.KVCache // per layer (attention layers)
	kraw, kb           []cuda.DevicePtr     // per layer (attention layers), float32 [kcap, dih], [kcap/cr, dih]
	pleConv            []cuda.DevicePtr     // per PLE layer: [(Kp−1)·N, S·H]
	pleEmb             []cuda.DevicePtr     // per PLE layer: the pass's n-gram rows [T, Dp]
	hashers            []*qwen38.NgramHasher
	recent             []int     // the last N−1 ids fed: the hashers' history (snapshots)
	rows               [][]int64 // per PLE layer: the pass's row ids
	emb                []float32 // the pass's rows on the host [T, Dp]
	s                  scratch
	replay             devshared.RouteReplay // SetRouteOverride's routing (route.go)
	failed             error
	allocs             []cuda.DevicePtr
}

// scratch is a pass's device buffers for up to chunkLen tokens.
type scratch struct {
	R, rn, gate, a, c, x, y       cuda.DevicePtr
	pk, pv, pq, pu, pun           cuda.DevicePtr
	proj, convOut, z, ga, gb, o   cuda.DevicePtr
	oraw, q2, k, v, qk            cuda.DevicePtr
	scores, iscores, keep         cuda.DevicePtr // sized by the KV capacity
	router, sel, weight, sg, su   cuda.DevicePtr
	gates, eg, eu, routed, shared cuda.DevicePtr
	final, logits                 cuda.DevicePtr
	qa                            gpukernels.QAct
}

// NewState allocates a sequence.
func (m *Model) NewState(opt StateOptions) (*State, error) {
	cfg := m.cfg
	st := &State{m: m, maxCtx: opt.MaxContext, chunkLen: max(m.chunk, 1), kvBits: cmp.Or(opt.KVBits, model.KVFloat32), noGraph: opt.NoGraph || m.noGraph}
	if !model.ValidKVBits(st.kvBits) {
		return nil, fmt.Errorf("qwen38gpu: a KV cache of %d bits; use 8, 16 or 32", opt.KVBits)
	}
	if st.maxCtx <= 0 || st.maxCtx > cfg.MaxContext {
		st.maxCtx = cfg.MaxContext
	}
	st.kcap = min(cmp.Or(max(opt.KVInitial, 0), 1024), st.maxCtx)
	for k := range m.ple {
		st.hashers = append(st.hashers, qwen38.NewNgramHasher(cfg, k))
	}
	st.rows = make([][]int64, len(m.ple))
	err := m.dev.Do(func(c *cuda.Ctx) error { return st.alloc(c) })
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

func (st *State) alloc(c *cuda.Ctx) error {
	g, cfg := st.m.g, st.m.cfg
	z := &devshared.Zeroed{C: c, Allocs: &st.allocs}
	a := z.Alloc
	T := st.chunkLen
	f := func(n int) cuda.DevicePtr { return a(4 * T * max(n, 1)) }
	st.dpos, st.tokens, st.next = a(4), a(4*T), a(4)
	st.cand = a(4 * (4 + 2*MaxCandidates))
	L := len(cfg.Layers)
	st.conv, st.rec = make([]cuda.DevicePtr, L), make([]cuda.DevicePtr, L)
	st.kv, st.kraw, st.kb = make([]gpukernels.KVCache, L), make([]cuda.DevicePtr, L), make([]cuda.DevicePtr, L)
	for l, kind := range cfg.Layers {
		if kind == qwen38.LinearAttention {
			st.conv[l] = a(4 * (g.K - 1) * g.C)
			st.rec[l] = a(4 * g.gdn.Hv * g.gdn.Dk * g.gdn.Dv)
		}
	}
	for range st.m.ple {
		st.pleConv = append(st.pleConv, a(4*(g.Kp-1)*g.N*g.SH))
		st.pleEmb = append(st.pleEmb, f(g.Dp))
	}
	s := &st.s
	s.R, s.rn, s.gate = f(g.SH), f(g.SH), f(g.SH)
	s.a, s.c, s.x, s.y = f(g.r), f(g.S), f(g.H), f(g.H)
	if len(st.m.ple) > 0 {
		s.pk, s.pv, s.pq, s.pu, s.pun = f(g.SH), f(g.H), f(g.SH), f(g.SH), f(g.SH)
	}
	s.proj, s.convOut, s.z, s.ga, s.gb = f(g.C), f(g.C), f(g.vd), f(g.gdn.Hv), f(g.gdn.Hv)
	s.o, s.oraw = f(max(g.vd, g.attn.Hq*g.attn.Dh)), f(g.vd)
	s.q2, s.k, s.v, s.qk = f(2*g.attn.Hq*g.attn.Dh), f(g.kvd), f(g.kvd), f((g.idx.Heads+1)*g.idx.Dim)
	s.router, s.sel, s.weight, s.gates = f(g.E), f(g.k), f(g.k), f(1)
	s.sg, s.su, s.shared = f(g.Is), f(g.Is), f(g.H)
	s.eg, s.eu, s.routed = f(g.k*g.I), f(g.k*g.I), f(g.k*g.H)
	s.final, s.logits = a(4*g.H), a(4*g.V)
	widest := max(g.H, g.SH, g.r, g.Dp, g.vd, g.attn.Hq*g.attn.Dh, g.Is, g.k*g.I)
	q8, q4, ds := gpukernels.QActBytes(T, widest+64)
	s.qa = gpukernels.QAct{Q8: a(int(q8)), Q4: a(int(q4)), DX: a(int(ds)), SX: a(int(ds))}
	if z.Err != nil {
		return fmt.Errorf("qwen38gpu: allocating a sequence: %w", z.Err)
	}
	return st.allocKV(c, st.kcap, 0)
}

// nbMax is the most complete indexer blocks a token of a capacity-token
// sequence sees.
func (st *State) nbMax(capacity int) int { return max(capacity/st.m.g.idx.Block, 1) }

// allocKV gives every attention layer a cache of capacity tokens at the
// state's width and indexer keys for as many, keeping the first keep
// tokens, and sizes the scores scratch to match.
func (st *State) allocKV(c *cuda.Ctx, capacity, keep int) error {
	g, cfg := st.m.g, st.m.cfg
	values, scales := gpukernels.KVRowBytes(st.kvBits, g.kvd, g.attn.Dh)
	grow := func(buf *cuda.DevicePtr, row int64, keepRows int) error {
		if row == 0 {
			return nil
		}
		return devshared.GrowRows(c, buf, row, max(capacity, 1), keepRows, func(err error) error {
			return fmt.Errorf("qwen38gpu: no room for a %d-bit KV cache of %d tokens: %w", st.kvBits, capacity, err)
		})
	}
	dih := int64(4 * g.idx.Dim)
	for l, kind := range cfg.Layers {
		if kind != qwen38.SparseAttention {
			continue
		}
		kv := &st.kv[l]
		kv.Bits = st.kvBits
		for _, b := range []struct {
			buf *cuda.DevicePtr
			row int64
		}{{&kv.K, values}, {&kv.V, values}, {&kv.KS, scales}, {&kv.VS, scales}, {&st.kraw[l], dih}} {
			if err := grow(b.buf, b.row, keep); err != nil {
				return err
			}
		}
		// block keys: capacity/cr rows, of which keep/cr are complete
		if err := devshared.GrowRows(c, &st.kb[l], dih, st.nbMax(capacity), keep/g.idx.Block, noRoomForBlockKeys); err != nil {
			return err
		}
	}
	for _, b := range []struct {
		buf   *cuda.DevicePtr
		bytes int
	}{{&st.s.scores, 4 * st.chunkLen * max(g.attn.Hq, 1) * capacity}, {&st.s.iscores, 4 * st.chunkLen * st.nbMax(capacity)},
		{&st.s.keep, st.chunkLen * st.nbMax(capacity)}} {
		if *b.buf != 0 {
			c.Free(*b.buf)
		}
		p, err := c.Alloc(uint64(max(b.bytes, 4)))
		if err != nil {
			return fmt.Errorf("qwen38gpu: no room for attention scores over %d tokens: %w", capacity, err)
		}
		*b.buf = p
	}
	st.dropGraphs(c) // captured with the old buffers and capacity
	st.kcap = capacity
	return nil
}

// dropGraphs destroys the decode graphs: the next step captures afresh.
func (st *State) dropGraphs(c *cuda.Ctx) {
	for i, g := range st.graphs {
		c.DestroyGraph(g)
		st.graphs[i] = nil
	}
}

// GraphKernels is the number of kernels in the latest decode graph (0
// before the first graphed step or without graphs).
func (st *State) GraphKernels() int { return st.graphKernels }

func noRoomForBlockKeys(err error) error {
	return fmt.Errorf("qwen38gpu: no room for the indexer's block keys: %w", err)
}

// Close frees the sequence's device memory.
func (st *State) Close() {
	st.m.dev.Do(func(c *cuda.Ctx) error {
		st.dropGraphs(c)
		for _, p := range st.allocs {
			c.Free(p)
		}
		for l, kv := range st.kv {
			for _, p := range []cuda.DevicePtr{kv.K, kv.V, kv.KS, kv.VS, st.kraw[l], st.kb[l]} {
				if p != 0 {
					c.Free(p)
				}
			}
		}
		for _, p := range []cuda.DevicePtr{st.s.scores, st.s.iscores, st.s.keep} {
			if p != 0 {
				c.Free(p)
			}
		}
		return nil
	})
	st.allocs, st.kv = nil, nil
	st.s.scores, st.s.iscores, st.s.keep = 0, 0, 0
}

// Len is the number of tokens the sequence holds.
func (st *State) Len() int { return st.pos }

// KVBits implements model.KVWidth.
func (st *State) KVBits() int { return st.kvBits }

// MaxContext is the most tokens the sequence may hold.
func (st *State) MaxContext() int { return st.maxCtx }

// Forward feeds ids; afterwards the last token's logits and greedy pick
// are on the device (Logits, Argmax).
func (st *State) Forward(ids []int) error {
	return devshared.Forward("qwen38gpu", st.m.dev, &st.failed, ids, st.m.g.V, st.pos, st.kcap, st.maxCtx, st.chunkLen, st.allocKV, st.pass)
}

// pass runs T ≤ chunkLen tokens through the decoder. Each PLE layer's rows
// are hashed from the ids and announced to the table before the first
// launch. A prefill pass (or a decode step under NoGraph) reads them on
// the host when the PLE layer is reached (while the device runs the layers
// before it) and copies them ahead of it; a decode step reads and copies
// them all before replaying its graph.
func (st *State) pass(c *cuda.Ctx, ids []int) error {
	m := st.m
	T := len(ids)
	// The replayed routing first: an override that refuses the pass's
	// positions fails it before anything is enqueued or hashed.
	if err := st.stageRoutes(c, T); err != nil {
		return err
	}
	tok := make([]int32, T)
	for i, id := range ids {
		tok[i] = int32(id)
	}
	if err := c.HtoDAsync(st.tokens, cuda.Bytes(tok)); err != nil {
		return err
	}
	pf, _ := m.ngrams.(qwen38.NgramPrefetcher)
	for k, h := range st.hashers {
		st.rows[k] = h.Rows(st.rows[k][:0], ids)
		if pf != nil {
			pf.Prefetch(k, st.rows[k])
		}
	}
	st.noteFed(ids)
	l := &gpukernels.Launcher{C: c, K: m.ks, MMA: m.mma, GDNPipe: m.gdnPipe, GDNPar: m.gdnPar, GDNReg: m.gdnReg}
	q := &Launcher{C: c, K: m.qk}
	f := &forward{st: st, l: l, q: q, T: T, sparse: sparsePass(st.pos, T, m.g.idx)}
	// Host-planned streaming works on the host between layers (reading each
	// streamed layer's picks back): no graph.
	if T > 1 || st.noGraph || m.hostPlanned() {
		if err := f.launches(); err != nil {
			return err
		}
		st.pos += T
		return nil
	}
	// A decode step: its rows into the fixed buffers (ordered on the stream
	// after the previous step, which read the old rows), then the graph.
	for _, p := range m.ple {
		if err := st.copyRows(c, p, T); err != nil {
			return err
		}
	}
	mode := 0
	if f.sparse {
		mode = 1
	}
	if st.graphs[mode] == nil {
		f.graphed = true
		if err := c.BeginCapture(); err != nil {
			return err
		}
		ferr := f.launches()
		gr, err := c.EndCapture()
		if ferr != nil {
			c.DestroyGraph(gr)
			return ferr
		}
		if err != nil {
			return err
		}
		st.graphs[mode], st.graphKernels = gr, l.Count+q.Count
	}
	if err := c.LaunchGraph(st.graphs[mode]); err != nil {
		return err
	}
	st.pos += T
	return nil
}

// copyRows reads PLE layer p's rows of the pass on the host and copies
// them into its device buffer.
func (st *State) copyRows(c *cuda.Ctx, p *pleW, T int) error {
	g := st.m.g
	emb := st.emb[:0]
	if cap(emb) < T*g.Dp {
		emb = make([]float32, T*g.Dp)
	}
	emb = emb[:T*g.Dp]
	st.emb = emb
	if err := st.m.ngrams.Rows(p.index, st.rows[p.index], emb); err != nil {
		return fmt.Errorf("qwen38gpu: PLE layer %d: reading n-gram rows: %w", p.index, err)
	}
	// Pageable memory is staged at the call, so emb may be reused at once.
	return c.HtoDAsync(st.pleEmb[p.index], cuda.Bytes(emb))
}

// launches is a pass's work on the stream: every kernel, and, unless they
// are being captured into a decode graph, each PLE layer's row copy ahead
// of its layer (the rows read while the device runs the layers before).
func (f *forward) launches() error {
	st, m, g, s, l, q, T := f.st, f.st.m, f.st.m.g, &f.st.s, f.l, f.q, f.T
	f.do(l.Embed(s.x, m.embed, st.tokens, T))
	f.do(q.Rep(s.R, s.x, g.H, g.S, T))
	for i := range m.layers {
		ly := &m.layers[i]
		if ly.ple != nil {
			f.ple(ly.ple)
		}
		f.read(&ly.attnHC, s.R, s.x, T, true)
		switch ly.kind {
		case qwen38.LinearAttention:
			f.gdn(i, ly)
		case qwen38.SparseAttention:
			f.attention(i, ly)
		}
		f.do(q.HCWrite(s.R, s.c, s.y, g.H, g.S, T))
		f.read(&ly.mlpHC, s.R, s.x, T, true)
		f.moe(i, ly)
		f.do(q.HCWrite(s.R, s.c, s.y, g.H, g.S, T))
	}
	f.read(&m.mixer, s.R+cuda.DevicePtr(4*(T-1)*g.SH), s.final, 1, false)
	f.prod(s.logits, m.lmHead, s.final, 1, g.H)
	f.do(l.Argmax(st.next, s.logits, g.V))
	f.do(l.Advance(st.dpos, T))
	return f.err
}

// forward is one pass's launches.
type forward struct {
	st      *State
	l       *gpukernels.Launcher
	q       *Launcher
	T       int
	sparse  bool // a token of the pass is past the dense window (sparsePass)
	graphed bool // captured into a decode graph: the rows were copied ahead
	err     error
	held    quantized // what the quantized scratch holds
}

type quantized struct {
	x             cuda.DevicePtr
	vectors, cols int
}

// do records a launch's error. Every launch but a product's goes through
// it and may overwrite what was quantized, so the scratch is forgotten.
func (f *forward) do(err error) {
	f.check(err)
	f.held = quantized{}
}

func (f *forward) check(err error) {
	if f.err == nil {
		f.err = err
	}
}

// prod is y [vectors, w.Rows] = w·x, quantizing x first for a Q4/Q8 w
// (once while x is what the scratch holds).
func (f *forward) prod(y cuda.DevicePtr, w *gpukernels.Mat, x cuda.DevicePtr, vectors, cols int) {
	f.gathered(y, w, x, vectors, cols, 0, 1, false)
}

// gathered is prod for experts picked by sel [T, slots] (xslot: each slot
// reads its own input vector).
func (f *forward) gathered(y cuda.DevicePtr, w *gpukernels.Mat, x cuda.DevicePtr, vectors, cols int, sel cuda.DevicePtr, slots int, xslot bool) {
	s := &f.st.s
	if w.Quantized() && f.held != (quantized{x, vectors, cols}) {
		f.check(f.l.Quantize(&s.qa, x, vectors, cols))
		f.held = quantized{x, vectors, cols}
	}
	if y == f.held.x {
		f.held = quantized{}
	}
	T := vectors
	if xslot {
		T = vectors / slots
	}
	f.check(f.l.GEMV(y, w, x, &s.qa, 0, sel, slots, xslot, T))
}

// read is the gated residual's read (qwen38 read) of T rows of R into x
// [T, H], and with gates the write gates into s.c [T, S].
func (f *forward) read(h *hcW, R, x cuda.DevicePtr, T int, gates bool) {
	g, s, q := f.st.m.g, &f.st.s, f.q
	f.do(q.GroupedNorm(s.rn, R, h.norm, g.H, g.S, T, g.eps))
	f.prod(s.a, h.down, s.rn, T, g.SH)
	if gates {
		f.prod(s.c, h.inject, s.rn, T, g.SH)
		f.do(q.HCWriteGates(s.c, T*g.S, g.S))
	}
	f.do(q.HCAct(s.a, T*g.r, g.S))
	f.prod(s.gate, h.up, s.a, T, g.r)
	f.do(q.HCMean(x, s.gate, s.rn, g.H, g.S, T))
}

// ple adds the PLE layer's u + z to the residual (qwen38 pleBlock).
func (f *forward) ple(p *pleW) {
	st, g, s, q := f.st, f.st.m.g, &f.st.s, f.q
	T := f.T
	if !f.graphed && f.err == nil {
		f.do(st.copyRows(f.l.C, p, T))
	}
	if f.err != nil {
		return
	}
	emb := st.pleEmb[p.index]
	f.prod(s.pk, p.key, emb, T, g.Dp)
	f.prod(s.pv, p.value, emb, T, g.Dp)
	f.do(q.GroupedNorm(s.pk, s.pk, p.normKey, g.H, g.S, T, g.eps))
	f.do(q.GroupedNorm(s.pq, s.R, p.normQuery, g.H, g.S, T, g.eps))
	f.do(q.PLEGate(s.pu, s.pk, s.pq, s.pv, g.H, g.S, T, sqrtF32(g.H)))
	f.do(q.GroupedNorm(s.pun, s.pu, p.normConv, g.H, g.S, T, g.eps))
	f.do(q.PLEConv(s.R, s.pu, s.pun, st.pleConv[p.index], p.conv, g.SH, g.Kp, g.N, T))
}

// gdn is the Gated DeltaNet mixer of layer i, x → y.
func (f *forward) gdn(i int, ly *layerW) {
	st, g, s := f.st, f.st.m.g, &f.st.s
	T := f.T
	f.prod(s.proj, ly.qkv, s.x, T, g.H)
	f.prod(s.z, ly.z, s.x, T, g.H)
	f.prod(s.gb, ly.b, s.x, T, g.H)
	f.prod(s.ga, ly.a, s.x, T, g.H)
	f.do(f.l.GDNConv(s.convOut, s.proj, st.conv[i], ly.conv, g.C, g.K, T))
	if gpukernels.GDNSplitFits(g.gdn, st.chunkLen) {
		f.do(f.l.GDNRec(s.oraw, st.rec[i], s.convOut, s.ga, s.gb, ly.negExpA, ly.dtBias, g.gdn, T, g.gdn.Hv))
		f.do(f.q.GDNNorm(s.o, s.oraw, s.z, ly.gdnNorm, g.gdn, g.eps, T))
	} else {
		f.do(f.q.GDNHeads(s.o, st.rec[i], s.convOut, s.z, s.ga, s.gb, ly.negExpA, ly.dtBias, ly.gdnNorm, g.gdn, g.eps, T, g.gdn.Hv))
	}
	f.prod(s.y, ly.out, s.o, T, g.vd)
}

// attention is the gated attention with the QSA indexer of layer i, x → y
// (qwen38 attnMixer): keys, values and raw indexer keys appended, block
// keys completed; past the dense window the indexer's selection masks the
// scores.
func (f *forward) attention(i int, ly *layerW) {
	st, m, g, s := f.st, f.st.m, f.st.m.g, &f.st.s
	T, is := f.T, g.idx
	f.prod(s.q2, ly.q, s.x, T, g.H)
	f.prod(s.k, ly.k, s.x, T, g.H)
	f.prod(s.v, ly.v, s.x, T, g.H)
	f.prod(s.qk, ly.index, s.x, T, g.H)
	f.do(f.l.AttnKV(st.kv[i], s.k, s.v, ly.kNorm, m.invFreq, st.dpos, g.attn, g.eps, T))
	f.do(f.q.IndexerKeys(st.kraw[i], s.qk, is, st.dpos, T))
	f.do(f.q.IndexerBlocks(st.kb[i], st.kraw[i], ly.ikNorm, m.invFreq, is, st.dpos, T, g.eps))
	if f.sparse {
		nb := st.nbMax(st.kcap)
		f.do(f.q.IndexerScores(s.iscores, s.qk, ly.iqNorm, st.kb[i], m.invFreq, is, nb, st.dpos, T, g.eps, sqrtF32(is.Dim)))
		f.do(f.q.IndexerSelect(s.keep, s.iscores, is, nb, st.dpos, T))
		f.do(f.q.SparseAttention(s.o, s.scores, s.q2, st.kv[i], ly.qNorm, m.invFreq, st.dpos, g.attn, g.eps, st.kcap, T, s.keep, is, nb))
	} else {
		f.do(f.l.AttnHeads(s.o, s.scores, s.q2, st.kv[i], ly.qNorm, m.invFreq, st.dpos, g.attn, g.eps, st.kcap, T))
	}
	f.prod(s.y, ly.o, s.o, T, g.attn.Hq*g.attn.Dh)
}

// sparsePass reports whether a pass of T tokens from pos has a token past
// the dense window: its last token sees more than B complete blocks.
func sparsePass(pos, T int, is IndexerShape) bool { return (pos+T)/is.Block > is.Keep }

// moe is the MoE block, x → y: router, shared expert with its gate, the
// top-k routed experts, combined (qwen35's math, blocks.MoE). The routed
// experts are layer i's resident ones, or its streamed ones resolved to
// slots or staged (routedExperts).
func (f *forward) moe(i int, ly *layerW) {
	g, s, l := f.st.m.g, &f.st.s, f.l
	T := f.T
	f.prod(s.router, ly.router, s.x, T, g.H)
	f.prod(s.gates, ly.sharedG, s.x, T, g.H)
	f.prod(s.sg, ly.sGate, s.x, T, g.H)
	f.prod(s.su, ly.sUp, s.x, T, g.H)
	f.do(f.st.route(l, i, T))
	gate, up, down, sel := f.routedExperts(ly)
	f.gathered(s.eg, gate, s.x, T, g.H, sel, g.k, false)
	f.gathered(s.eu, up, s.x, T, g.H, sel, g.k, false)
	f.do(l.SwiGLU(s.sg, s.su, T*g.Is))
	f.prod(s.shared, ly.sDown, s.sg, T, g.Is)
	f.do(l.SwiGLU(s.eg, s.eu, T*g.k*g.I))
	f.gathered(s.routed, down, s.eg, T*g.k, g.I, sel, g.k, true)
	f.do(f.q.Zero(s.y, T*g.H))
	f.do(l.Combine(s.y, s.routed, s.weight, s.shared, s.gates, g.k, g.H, T, 1))
}

// Logits copies the last token's logits into dst [V].
func (st *State) Logits(dst []float32) error {
	if len(dst) != st.m.g.V {
		return fmt.Errorf("qwen38gpu: Logits: %d values, want vocab %d", len(dst), st.m.g.V)
	}
	return st.m.dev.Do(func(c *cuda.Ctx) error { return c.DtoH(cuda.Bytes(dst), st.s.logits) })
}

// Argmax returns the greedy next token (computed on the device: the lowest
// id among equal maxima, an error on NaN logits).
func (st *State) Argmax() (int, error) {
	var id [1]int32
	if err := st.m.dev.Do(func(c *cuda.Ctx) error { return c.DtoH(cuda.Bytes(id[:]), st.next) }); err != nil {
		return 0, err
	}
	if id[0] < 0 {
		return 0, fmt.Errorf("qwen38gpu: the logits hold a NaN: the forward pass is broken")
	}
	return int(id[0]), nil
}
