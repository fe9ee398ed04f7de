package server

import (
	"context"
	"slices"
	"sync"
	"time"

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
}

// RuntimeEngine serves an nvmai runtime.Engine: one session, whose state is
// continued when a prompt extends what it holds, or restored from the
// prompt cache's longest matching snapshot.
type RuntimeEngine struct {
	e       *runtime.Engine
	opt     RuntimeOptions
	mu      sync.Mutex
	sess    *runtime.Session
	held    []int // the tokens the session stands for (its pending one included)
	cache   *promptcache.Cache[*runtime.Snapshot]
	stopIDs []int
	imStart int // <|im_start|>: messages begin there (-1 when absent)
	format  formatMasker
	disk    *diskTier // nil: RAM only
}

// NewRuntimeEngine wraps e.
func NewRuntimeEngine(e *runtime.Engine, opt RuntimeOptions) *RuntimeEngine {
	if opt.Boundaries == 0 {
		opt.Boundaries = 2
	}
	r := &RuntimeEngine{e: e, opt: opt, cache: promptcache.New[*runtime.Snapshot](opt.CacheBytes), imStart: -1}
	r.sess = e.NewSession(runtime.SessionOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: opt.KVBits})
	r.disk = newDiskTier(e, r.sess, opt)
	r.stopIDs = e.EOSIDs()
	if id, ok := e.Tokenizer.TokenID("<|im_end|>"); ok && !slices.Contains(r.stopIDs, id) {
		r.stopIDs = append(r.stopIDs, id)
	}
	if id, ok := e.Tokenizer.TokenID("<|im_start|>"); ok {
		r.imStart = id
	}
	return r
}

// Info implements Engine.
func (r *RuntimeEngine) Info() ModelInfo {
	ctx := r.opt.MaxContext
	if ctx <= 0 {
		ctx = r.e.Info().MaxContext // YaRN's extended context when the model or the flag sets it
	}
	return ModelInfo{ID: r.opt.ModelID, Context: ctx, Sampling: r.e.DefaultSampling(), Budget: r.opt.Budget}
}

// Close releases the session's backend memory; the engine is unusable
// after it but for Info and Tokenize.
func (r *RuntimeEngine) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sess.Close()
	r.held = nil
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
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.disk.flushPending()
	start := time.Now()
	var out Outcome
	reused, err := r.resume(g.Prompt)
	if err != nil {
		return out, r.fail(err)
	}
	out.CachedTokens = reused
	if err := r.prefill(ctx, g.Prompt, reused); err != nil {
		return out, r.fail(err)
	}
	out.Prefill = time.Since(start)
	constraint, err := r.format.constraint(r.e.Tokenizer, r.stopIDs, g)
	if err != nil {
		return out, err
	}
	var first time.Duration
	res, err := r.sess.Generate(ctx, nil, runtime.GenerateOptions{
		MaxTokens: g.MaxTokens, Sampling: g.Sampling, StopIDs: r.stopIDs, PrefillChunk: r.opt.PrefillChunk,
		Constraint: constraint,
		StopAfter: func(_ int, text string) bool {
			if first == 0 {
				first = time.Since(start)
			}
			t0 := time.Now()
			more := onToken(text)
			out.Callbacks += time.Since(t0)
			return !more
		},
	})
	if err != nil {
		return out, r.fail(err)
	}
	r.held = append(slices.Clone(g.Prompt), res.IDs...)
	r.put(r.held)
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
	return out, nil
}

// resume puts the session at the longest reusable prefix of prompt and
// returns its length. At least one prompt token is always left to feed,
// so the logits the first sample needs are fresh (snapshots hold none).
func (r *RuntimeEngine) resume(prompt []int) (int, error) {
	limit := len(prompt) - 1
	live := 0
	if len(r.held) <= limit && slices.Equal(r.held, prompt[:len(r.held)]) {
		live = len(r.held)
	}
	n, snap, ok := r.cache.Lookup(prompt[:limit])
	if dn, dsnap := r.disk.lookup(r.sess, prompt[:limit], max(n, live)); dn > 0 {
		n, snap, ok = dn, dsnap, true
		r.cache.Put(prompt[:n], snap, snap.Bytes())
	}
	if ok && n > live {
		if err := r.sess.Restore(snap); err != nil {
			return 0, err
		}
		r.held = slices.Clone(prompt[:n])
		return n, nil
	}
	if live == 0 {
		r.sess.Reset()
		r.held = nil
	}
	return live, nil
}

// prefill feeds prompt[from:] in segments ending at the snapshot points,
// taking a snapshot at each, then the prompt's last token.
func (r *RuntimeEngine) prefill(ctx context.Context, prompt []int, from int) error {
	pos := from
	for _, p := range r.snapshotPoints(prompt, from) {
		if err := r.sess.Prefill(ctx, prompt[pos:p], r.opt.PrefillChunk); err != nil {
			return err
		}
		pos = p
		r.held = slices.Clone(prompt[:p])
		r.put(r.held)
	}
	if err := r.sess.Prefill(ctx, prompt[pos:], r.opt.PrefillChunk); err != nil {
		return err
	}
	r.held = slices.Clone(prompt)
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

func (r *RuntimeEngine) put(tokens []int) {
	toDisk := r.disk.wants(tokens)
	if (r.opt.CacheBytes <= 0 && !toDisk) || len(tokens) == 0 {
		return
	}
	snap, held := r.cache.Peek(tokens)
	if !held {
		if snap = r.sess.Snapshot(); snap == nil {
			return
		}
		r.cache.Put(tokens, snap, snap.Bytes())
	}
	if toDisk {
		r.disk.add(tokens, snap)
	}
}

// fail leaves the session empty: a cancelled or failed forward leaves it
// at a position the caller cannot name.
func (r *RuntimeEngine) fail(err error) error {
	r.sess.Reset()
	r.held = nil
	return err
}
