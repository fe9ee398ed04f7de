package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/promptcache"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// RuntimeOptions configures a RuntimeEngine.
type RuntimeOptions struct {
	ModelID      string
	Budget       string // shown in the ready line
	KVInitial    int
	KVBits       int   // KV cache width (runtime.SessionOptions.KVBits; 0: the default, 8)
	MaxContext   int   // 0: the model's maximum
	PrefillChunk int   // tokens per forward (default 256)
	CacheBytes   int64 // prompt-cache budget; 0 disables it
	// Boundaries is how many of the last message boundaries before the end
	// of a prompt get a snapshot (default 2), besides the end of the
	// prompt and the end of the reply.
	Boundaries int
	// Disk, when set, also keeps snapshots of long prefixes on disk, where
	// a restarted server finds them (promptdisk.go).
	Disk *promptcache.Disk
	// TemplateSHA256 is the hex sha256 of the chat template's source: part
	// of the disk key, so a changed template never hits. The disk tier
	// stays off without it.
	TemplateSHA256 string
	// DiskMinTokens is the shortest prefix whose snapshot goes to disk
	// (default DefaultDiskMinTokens).
	DiskMinTokens int
	// SnapshotGap is the fewest prompt tokens between two snapshots a
	// request takes before its first token (and between the first and
	// where the request resumed): a point closer to the last one is
	// skipped, since resuming there would save re-feeding fewer tokens
	// than the snapshot costs. 0 keeps every point (the CPU engine, whose
	// prefill is slow beside its copy); the GPU engine copies hundreds of
	// MiB to host memory per snapshot and feeds tens of tokens in that
	// time. The end of the reply is always kept: the next turn resumes
	// there.
	SnapshotGap int
	// Parallel is how many generations run at once (--parallel; 0 or 1:
	// one session, as before): that many sessions (slots) whose decode
	// steps are batched (parallel.go). More than 1 needs an engine with a
	// batched step (runtime.Engine.CanBatch); NewRuntimeEngine falls back
	// to 1 without one.
	Parallel int
	// ParallelPass is the most prompt tokens a request prefills in one
	// pass between two batched steps of the running ones (default
	// DefaultParallelPass), with Parallel > 1.
	ParallelPass int
	// Routing, when set, gives slot i's session the routing it replays in
	// place of the router's (runtime.SessionOptions.Routing: serve
	// --routing, a benchmark of realistic routing on random weights).
	Routing func(slot int) model.RouteOverride
}

// RuntimeEngine serves an nvmai runtime.Engine: one session per slot
// (Parallel), whose state is continued when a prompt extends what it
// holds, or restored from the prompt cache's longest matching snapshot
// (shared by every slot).
type RuntimeEngine struct {
	e   *runtime.Engine
	opt RuntimeOptions
	// gen serializes Generate with one slot (as the queue does).
	gen sync.Mutex
	// mu guards the slots' bookkeeping (busy, used), the disk tier's
	// pending writes and the format masker; held briefly.
	mu      sync.Mutex
	slots   []*slot
	free    chan struct{} // one token per free slot
	clock   uint64
	cache   *promptcache.Cache[*runtime.Snapshot]
	stopIDs []int
	imStart int // <|im_start|>: messages begin there (-1 when absent)
	format  formatMasker
	disk    *diskTier  // nil: RAM only
	sched   *scheduler // nil with one slot: the slot's goroutine runs the model itself
	closed  bool
}

// slot is one session and the tokens it stands for (its pending one
// included). Only the request that holds it (busy) touches held.
type slot struct {
	sess *runtime.Session
	held []int
	busy bool
	used uint64 // r.clock when it was last taken
}

// NewRuntimeEngine wraps e.
func NewRuntimeEngine(e *runtime.Engine, opt RuntimeOptions) *RuntimeEngine {
	if opt.Boundaries == 0 {
		opt.Boundaries = 2
	}
	if opt.Parallel < 1 || !e.CanBatch() {
		opt.Parallel = 1
	}
	if opt.ParallelPass <= 0 {
		opt.ParallelPass = DefaultParallelPass
	}
	r := &RuntimeEngine{e: e, opt: opt, cache: promptcache.New[*runtime.Snapshot](opt.CacheBytes), imStart: -1,
		free: make(chan struct{}, opt.Parallel)}
	for i := range opt.Parallel {
		so := runtime.SessionOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: opt.KVBits}
		if opt.Routing != nil {
			so.Routing = opt.Routing(i)
		}
		r.slots = append(r.slots, &slot{sess: e.NewSession(so)})
		r.free <- struct{}{}
	}
	r.disk = newDiskTier(e, r.slots[0].sess, opt)
	r.stopIDs = e.EOSIDs()
	if id, ok := e.Tokenizer.TokenID("<|im_end|>"); ok && !slices.Contains(r.stopIDs, id) {
		r.stopIDs = append(r.stopIDs, id)
	}
	if id, ok := e.Tokenizer.TokenID("<|im_start|>"); ok {
		r.imStart = id
	}
	if opt.Parallel > 1 {
		r.sched = newScheduler(e)
	}
	return r
}

// Parallel is how many generations the engine runs at once; the server's
// queue admits that many.
func (r *RuntimeEngine) Parallel() int { return r.opt.Parallel }

// Info implements Engine.
func (r *RuntimeEngine) Info() ModelInfo {
	ctx := r.opt.MaxContext
	if ctx <= 0 {
		ctx = r.e.Info().MaxContext // YaRN's extended context when the model or the flag sets it
	}
	return ModelInfo{ID: r.opt.ModelID, Context: ctx, Sampling: r.e.DefaultSampling(), Budget: r.opt.Budget}
}

// Close releases the sessions' backend memory and stops the scheduler; the
// engine is unusable after it but for Info and Tokenize. Generations still
// running fail.
func (r *RuntimeEngine) Close() {
	if r.sched != nil {
		r.sched.close()
	}
	r.gen.Lock()
	defer r.gen.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	for _, sl := range r.slots {
		if !sl.busy {
			sl.sess.Close()
			sl.held = nil
		}
	}
	r.cache = promptcache.New[*runtime.Snapshot](0)
}

// Tokenize implements Engine.
func (r *RuntimeEngine) Tokenize(text string, limit int) ([]int, bool) {
	return r.e.Tokenizer.EncodeLimit(text, limit)
}

// CacheStats reports the prompt cache.
func (r *RuntimeEngine) CacheStats() promptcache.Stats { return r.cache.Stats() }

// DiskCacheStats reports the prompt cache's disk tier (zero when off).
func (r *RuntimeEngine) DiskCacheStats() promptcache.DiskStats {
	if r.disk == nil {
		return promptcache.DiskStats{}
	}
	return r.disk.disk.Stats()
}

// Generate implements Engine.
func (r *RuntimeEngine) Generate(ctx context.Context, g Generation, onToken func(string) bool) (Outcome, error) {
	if r.sched != nil {
		return r.generateParallel(ctx, g, onToken)
	}
	r.gen.Lock()
	defer r.gen.Unlock()
	sl := r.slots[0]
	if r.closed {
		return Outcome{}, errEngineClosed
	}
	defer r.flushDisk()
	start := time.Now()
	var out Outcome
	constraint, err := r.begin(ctx, sl, g, start, &out)
	if err != nil {
		return out, err
	}
	var first time.Duration
	res, err := sl.sess.Generate(ctx, nil, r.generateOptions(g, constraint, start, &first, &out, onToken))
	if err != nil {
		return out, r.fail(sl, err)
	}
	r.finished(sl, g, res, first, &out)
	return out, nil
}

var errEngineClosed = errors.New("the engine was closed")

// begin puts the slot at g's prompt (the longest reusable prefix restored,
// the rest prefilled) and returns g's output constraint: what a generation
// does before its first token, one slot or several.
func (r *RuntimeEngine) begin(ctx context.Context, sl *slot, g Generation, start time.Time, out *Outcome) (runtime.Constraint, error) {
	reused, err := r.resume(ctx, sl, g.Prompt)
	if err != nil {
		return nil, r.fail(sl, err)
	}
	out.CachedTokens = reused
	if err := r.prefill(ctx, sl, g.Prompt, reused); err != nil {
		return nil, r.fail(sl, err)
	}
	out.Prefill = time.Since(start)
	return r.constraint(g)
}

// generateOptions are the runtime options of g: its limits and sampling,
// the stop ids, the constraint, and onToken behind StopAfter, timing the
// first token and the callbacks into out.
func (r *RuntimeEngine) generateOptions(g Generation, c runtime.Constraint, start time.Time, first *time.Duration, out *Outcome, onToken func(string) bool) runtime.GenerateOptions {
	return runtime.GenerateOptions{
		MaxTokens: g.MaxTokens, Sampling: g.Sampling, StopIDs: r.stopIDs, PrefillChunk: r.opt.PrefillChunk,
		Constraint: c,
		StopAfter: func(_ int, text string) bool {
			if *first == 0 {
				*first = time.Since(start)
			}
			t0 := time.Now()
			more := onToken(text)
			out.Callbacks += time.Since(t0)
			return !more
		},
	}
}

// constraint is g's output constraint (nil: none), from the shared masker.
func (r *RuntimeEngine) constraint(g Generation) (runtime.Constraint, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.format.constraint(r.e.Tokenizer, r.stopIDs, g)
}

// finished records a generation's end: the slot holds the prompt and the
// reply (its last token pending), snapshotted for the next turn.
func (r *RuntimeEngine) finished(sl *slot, g Generation, res *runtime.Result, first time.Duration, out *Outcome) {
	sl.held = append(slices.Clone(g.Prompt), res.IDs...)
	r.put(sl, sl.held)
	out.FirstToken = first
	out.CompletionTokens = len(res.IDs)
	out.Decode = time.Duration(res.DecodeSecs * float64(time.Second))
	switch res.StopReason {
	case "eos":
		out.Finish = FinishEOS
	case "callback":
		out.Finish = FinishStopped
	default:
		out.Finish = FinishLength
	}
}

// run runs f, which touches the model (a prefill pass, a snapshot, a
// restore, a reset): at once with one slot, else between the scheduler's
// batched steps, so no two touch the model at the same time.
func (r *RuntimeEngine) run(f func() error) error { return r.runQueued(f, nil) }

func (r *RuntimeEngine) runQueued(f func() error, queued chan struct{}) error {
	if r.sched == nil {
		return f()
	}
	return r.sched.run(f, queued)
}

// resume puts the slot's session at the longest reusable prefix of prompt
// and returns its length. At least one prompt token is always left to feed,
// so the logits the first sample needs are fresh (snapshots hold none).
func (r *RuntimeEngine) resume(ctx context.Context, sl *slot, prompt []int) (int, error) {
	limit := len(prompt) - 1
	live := 0
	if len(sl.held) <= limit && slices.Equal(sl.held, prompt[:len(sl.held)]) {
		live = len(sl.held)
	}
	reused := live
	var queued chan struct{}
	if j := joinHooks(ctx); j != nil {
		queued = j.queued
	}
	err := r.runQueued(func() error {
		// The snapshot found is this request's to restore even if another
		// slot's Put evicts it meanwhile: eviction only drops the cache's
		// reference, and a snapshot is never written after it is made.
		n, snap, ok := r.cache.Lookup(prompt[:limit])
		if dn, dsnap := r.disk.lookup(sl.sess, prompt[:limit], max(n, live)); dn > 0 {
			n, snap, ok = dn, dsnap, true
			r.cache.Put(prompt[:n], snap, snap.Bytes())
		}
		if ok && n > live {
			if err := sl.sess.Restore(snap); err != nil {
				return err
			}
			sl.held, reused = slices.Clone(prompt[:n]), n
			return nil
		}
		if live == 0 {
			sl.sess.Reset()
			sl.held = nil
		}
		return nil
	}, queued)
	return reused, err
}

// prefill feeds prompt[from:] in segments ending at the snapshot points,
// taking a snapshot at each, then the prompt's last token.
func (r *RuntimeEngine) prefill(ctx context.Context, sl *slot, prompt []int, from int) error {
	pos := from
	for _, p := range r.snapshotPoints(prompt, from) {
		if err := r.feed(ctx, sl, prompt[pos:p]); err != nil {
			return err
		}
		pos = p
		sl.held = slices.Clone(prompt[:p])
		r.put(sl, sl.held)
	}
	if err := r.feed(ctx, sl, prompt[pos:]); err != nil {
		return err
	}
	sl.held = slices.Clone(prompt)
	return nil
}

// feed prefills ids into the slot's session (after its pending token):
// with one slot in the session's own passes; with several one pass per
// scheduler item, of at most ParallelPass tokens while other sequences
// decode (each pass then sits between two of their steps), else of the
// session's own pass length.
func (r *RuntimeEngine) feed(ctx context.Context, sl *slot, ids []int) error {
	if r.sched == nil {
		return sl.sess.Prefill(ctx, ids, r.opt.PrefillChunk)
	}
	for len(ids) > 0 {
		n := 0
		if err := r.run(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			n = r.opt.PrefillChunk
			if n <= 0 {
				n = r.e.PrefillChunk(len(ids))
			}
			if r.sched.decoding { // read on the scheduler's goroutine, which runs this
				n = min(n, r.opt.ParallelPass)
			}
			n = min(n, len(ids))
			return sl.sess.Prefill(ctx, ids[:n], n+1) // one pass, the pending token included
		}); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// snapshotPoints are the last Boundaries message starts after from, and
// the prompt's last token but one: the longest prefix an identical
// request (a client's retry) can reuse, since one token is always fed.
// With SnapshotGap, a point fewer than that many tokens after from or
// after the point kept before it is dropped.
func (r *RuntimeEngine) snapshotPoints(prompt []int, from int) []int {
	end := len(prompt) - 1
	var starts []int
	if r.imStart >= 0 {
		for i := end - 1; i > from && len(starts) < r.opt.Boundaries; i-- {
			if prompt[i] == r.imStart {
				starts = append(starts, i)
			}
		}
	}
	slices.Reverse(starts)
	if end > from {
		starts = append(starts, end)
	}
	if r.opt.SnapshotGap <= 0 {
		return starts
	}
	kept, last := starts[:0], from
	for _, p := range starts {
		if p-last >= r.opt.SnapshotGap {
			kept, last = append(kept, p), p
		}
	}
	return kept
}

func (r *RuntimeEngine) put(sl *slot, tokens []int) {
	toDisk := r.disk.wants(tokens)
	if (r.opt.CacheBytes <= 0 && !toDisk) || len(tokens) == 0 {
		return
	}
	snap, held := r.cache.Peek(tokens)
	if !held {
		_ = r.run(func() error {
			snap = sl.sess.Snapshot()
			return nil
		})
		if snap == nil {
			return
		}
		r.cache.Put(tokens, snap, snap.Bytes())
	}
	if toDisk {
		r.mu.Lock()
		r.disk.add(tokens, snap)
		r.mu.Unlock()
	}
}

// flushDisk hands the snapshots kept for the disk to its writer.
func (r *RuntimeEngine) flushDisk() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.disk.flushPending()
}

// fail leaves the slot's session empty: a cancelled or failed forward
// leaves it at a position the caller cannot name.
func (r *RuntimeEngine) fail(sl *slot, err error) error {
	_ = r.run(func() error {
		sl.sess.Reset()
		return nil
	})
	sl.held = nil
	return err
}
