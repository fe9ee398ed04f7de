package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime/qwen35"
	"github.com/nvmai/nvmai/pkg/runtime/qwen38"
	"github.com/nvmai/nvmai/pkg/runtime/sample"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// Options configures loading.
type Options struct {
	Threads int // compute threads; default all cores
	Experts ExpertOptions
	// Backend, when set, runs the model instead of the CPU engine
	// (pkg/runtime/gpu provides one); the tokenizer and sampling stay here.
	Backend BackendLoader
	// RopeScaling "yarn" extends the model's context to MaxContext tokens
	// (2x or 4x; 0 = 4x); "" or "none" keeps its own.
	RopeScaling string
	MaxContext  int
}

// BackendLoader builds a Backend over an opened install.
type BackendLoader func(in *Install, cfg qwen35.Config) (Backend, error)

// Backend runs the model somewhere other than this package's CPU path.
type Backend interface {
	Name() string // for reports: "gpu (NVIDIA H200)"
	NewState(opt SessionOptions) (BackendState, error)
	Close()
}

// BackendState is one sequence of a Backend.
type BackendState interface {
	Len() int
	MaxContext() int
	Forward(ids []int) error    // afterwards the last token's logits are on the backend
	Logits(dst []float32) error // copies them
	Argmax() (int, error)       // the greedy pick among them, computed on the backend
	Close()
}

// SamplingState is a BackendState that samples where its logits are: Sample
// picks st's token from the last logits exactly as sample.Sampler.Finish
// would (history: the sampler's tokens so far, for its penalties), so only
// the id comes back. ok false means the row must be copied instead (a NaN
// or +Inf in it, or a nucleus longer than the backend takes).
type SamplingState interface {
	Sample(st sample.Step, history []int32) (id int, ok bool, err error)
}

// PassBackend is a Backend that names the prompt tokens it takes per pass
// (the GPU engine's chunk), so sessions feed it passes that long.
type PassBackend interface {
	PrefillChunk() int
}

// Engine is a loaded model ready to generate.
type Engine struct {
	Install    *Install
	Model      *qwen35.Model
	Tokenizer  *tokenizer.Tokenizer
	Generation *hf.GenerationConfig // nil when the install has no generation_config.json
	pool       *kernels.Pool
	cache      *expertcache.Cache // nil for dense models
	trace      *tracedExperts     // set when NVMAI_ROUTE_TRACE names a file
	experts    interface{ Close() error }
	backend    Backend       // nil: the CPU engine (Model)
	cfg        qwen35.Config // the geometry, whichever engine runs it
}

// Backend is the engine's non-CPU backend, or nil.
func (e *Engine) Backend() Backend { return e.backend }

// Load opens the install at dir and builds its model.
func Load(dir string, opt Options) (*Engine, error) {
	if opt.Threads <= 0 {
		opt.Threads = goruntime.NumCPU()
	}
	in, err := OpenInstall(dir)
	if err != nil {
		return nil, err
	}
	e := &Engine{Install: in}
	if err := e.load(opt); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) load(opt Options) error {
	dir, m := e.Install.Dir, e.Install.Manifest
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return err
	}
	e.Tokenizer = tok
	if e.Generation, err = readGeneration(dir, m.Geometry.VocabSize); err != nil {
		return err
	}
	cfg, err := modelConfig(e.Install, opt.RopeScaling, opt.MaxContext)
	if err != nil {
		return err
	}
	e.cfg = cfg
	if m.Architecture == packexperts.ArchQwen4Exp {
		return e.loadQwen38(opt)
	}
	if opt.Backend != nil && cfg.RopeScaling.Type != "" {
		// The GPU kernels take plain inverse frequencies and no attention factor.
		return fmt.Errorf("the GPU engine does not implement %s RoPE scaling yet; run this model with --engine cpu", cfg.RopeScaling.Type)
	}
	if opt.Backend != nil {
		e.pool = kernels.NewPool(1) // for the bench's memory probes only
		e.backend, err = opt.Backend(e.Install, cfg)
		return err
	}
	var ex qwen35.Experts
	if m.Experts != nil {
		if e.cache, err = openExperts(e.Install, opt.Experts); err != nil {
			return err
		}
		e.experts, ex = e.cache, e.cache
		if p := os.Getenv(RouteTraceEnv); p != "" {
			if e.trace, err = newTracedExperts(e.cache, p); err != nil {
				return err
			}
			e.experts, ex = e.trace, e.trace
		}
	}
	e.pool = kernels.NewPool(opt.Threads)
	e.Model, err = qwen35.New(cfg, e.Install, ex, e.pool)
	return err
}

func readGeneration(dir string, vocab int) (*hf.GenerationConfig, error) {
	p := filepath.Join(dir, "generation_config.json")
	raw, err := limits.ReadFile(p, limits.SnapshotJSON)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return hf.ParseGenerationConfig(raw, p, vocab)
}

// Close releases the mappings and worker threads.
func (e *Engine) Close() {
	if e.pool != nil {
		e.pool.Close()
	}
	if e.backend != nil {
		e.backend.Close()
	}
	if e.experts != nil {
		e.experts.Close()
	}
	e.Install.Close()
}

// DefaultSampling returns the generation config's sampling settings
// (greedy when it asks for no sampling or is absent).
func (e *Engine) DefaultSampling() sample.Params { return samplingDefaults(e.Generation) }

// InstallDefaults are what Load would report as the install's sampling
// defaults and context (YaRN's when its config sets it), read without
// loading it: serve --models-dir lists models that are not in memory.
func InstallDefaults(dir string, m *packexperts.Manifest) (sample.Params, int, error) {
	g, err := readGeneration(dir, m.Geometry.VocabSize)
	if err != nil {
		return sample.Params{}, 0, err
	}
	cfg, err := qwen35.ConfigFromGeometry(m.Architecture, m.Geometry)
	if err != nil {
		return sample.Params{}, 0, err
	}
	return samplingDefaults(g), cfg.MaxContext, nil
}

func samplingDefaults(g *hf.GenerationConfig) sample.Params {
	p := sample.Params{TopP: 1}
	if g == nil || (g.DoSample != nil && !*g.DoSample) {
		return p
	}
	p.Temperature = 1
	if g.Temperature != nil {
		p.Temperature = *g.Temperature
	}
	if g.TopK != nil {
		p.TopK = *g.TopK
	}
	if g.TopP != nil {
		p.TopP = *g.TopP
	}
	return p
}

// EOSIDs are the ids that end generation by default.
func (e *Engine) EOSIDs() []int {
	if e.Generation != nil && len(e.Generation.EOSTokenIDs) > 0 {
		return e.Generation.EOSTokenIDs
	}
	if id, ok := e.Tokenizer.TokenID("<|endoftext|>"); ok {
		return []int{id}
	}
	return nil
}

// Session is one conversation: model state that persists across Generate calls.
type Session struct {
	e       *Engine
	state   *qwen35.State
	bs      BackendState // instead of state when the engine has a Backend
	err     error        // the backend could not start the session
	pending []int        // sampled but not yet fed to the model (the last stop token)
	logits  []float32
	opt     SessionOptions // what the session was made with (a backend's Reset remakes its state)
}

// SessionOptions sizes a session's KV cache.
type SessionOptions struct {
	KVInitial  int // starting KV capacity in tokens (default 8192)
	MaxContext int // most tokens the session may hold (default the model's maximum)
	KVBits     int // KV cache width, 8, 16 or 32 (default qwen35.DefaultKVBits)
	// StepProfile, when set, receives the phase times of the session's
	// decode steps (qwen35.StepProfile; nvmai-run bench reports them).
	StepProfile *qwen35.StepProfile
}

// NewSession starts an empty conversation.
func (e *Engine) NewSession(opt SessionOptions) *Session {
	if e.backend != nil {
		s := &Session{e: e, logits: make([]float32, e.Install.Manifest.Geometry.VocabSize), opt: opt}
		s.bs, s.err = e.backend.NewState(opt)
		return s
	}
	bits := opt.KVBits
	if bits == 0 {
		bits = qwen35.DefaultKVBits
	}
	st := e.Model.NewState(qwen35.StateOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: bits})
	st.SetStepProfile(opt.StepProfile)
	return &Session{e: e, state: st, logits: make([]float32, e.Install.Manifest.Geometry.VocabSize)}
}

// GenerateOptions controls one generation.
type GenerateOptions struct {
	MaxTokens    int
	Sampling     sample.Params
	StopIDs      []int // generation ends after emitting one of these (unless IgnoreEOS)
	IgnoreEOS    bool
	PrefillChunk int                       // prompt tokens per pass; 0 picks it (Engine.PrefillChunk)
	OnToken      func(id int, text string) // streamed: text holds only complete UTF-8
	OnLogits     func(row []float32) error // the distribution each generated token was drawn from
	// OnStep, when set, is called before each token is picked, like
	// OnLogits but without the row, so a backend need not copy its logits
	// (a bench's or a chat's per-token hook).
	OnStep func() error
	// StopAfter, when set, is asked after each token is emitted (after
	// OnToken) whether generation ends there; true ends it with StopReason
	// "callback" (a server's stop strings and tool-call limits).
	StopAfter func(id int, text string) bool
	// Constraint, when set, restricts every generated token (structured
	// output): its Mask runs on the logits before penalties, temperature
	// and top-k/top-p, greedy or sampled, and its Advance on the token
	// picked. Unset, generation is unchanged.
	Constraint Constraint
}

// Constraint is a per-step restriction on the next token.
type Constraint interface {
	// Mask sets the logits of the tokens not allowed next to -Inf and
	// returns how many stay allowed; 0 ends generation with
	// ErrConstraintDeadEnd.
	Mask(logits []float32) (allowed int)
	// Advance records the token picked. ended reports a token that ends
	// the constrained output; generation stops there as at a stop token.
	Advance(id int) (ended bool, err error)
}

// ErrConstraintDeadEnd is returned (wrapped) when a Constraint allows no
// token: the vocabulary cannot continue what the constraint demands.
var ErrConstraintDeadEnd = errors.New("the output constraint allows no next token")

// Result is the outcome of a generation.
type Result struct {
	PromptIDs   []int         `json:"prompt_ids"`
	IDs         []int         `json:"ids"`
	Text        string        `json:"text"`
	StopReason  string        `json:"stop_reason"` // "eos", "max_tokens", "context_full", "callback"
	PrefillTokS float64       `json:"prefill_tok_s"`
	DecodeTokS  float64       `json:"decode_tok_s"`
	PrefillSecs float64       `json:"prefill_s"`
	DecodeSecs  float64       `json:"decode_s"`
	Experts     *ExpertReport `json:"experts,omitempty"` // MoE only: the expert cache during this generation
	PeakRSS     int64         `json:"peak_rss_bytes"`

	// PrefillChunk is the tokens per prefill pass (the last may be shorter).
	PrefillChunk int `json:"prefill_chunk"`
}

// ExpertReport is what the expert cache did during one generation.
type ExpertReport struct {
	Hits          int64   `json:"hits"`
	Misses        int64   `json:"misses"`
	HitRate       float64 `json:"hit_rate"`
	BytesRead     int64   `json:"bytes_read"`
	ReadRate      float64 `json:"read_bytes_per_s"` // while reading
	ReadSeconds   float64 `json:"read_s"`
	WaitSeconds   float64 `json:"io_wait_s"` // compute stalled on reads
	BytesPerToken float64 `json:"bytes_read_per_token"`
	SlotsPerLayer int     `json:"slots_per_layer"`
	BudgetBytes   int64   `json:"budget_bytes"`
	IOMode        string  `json:"io_mode"`
	IOThreads     int     `json:"io_threads"`
	// Experts read ahead on a guess (decode), how many of those were then
	// asked for, and their bytes (in BytesRead too).
	Prefetched    int64 `json:"prefetched"`
	PrefetchHits  int64 `json:"prefetch_hits"`
	PrefetchBytes int64 `json:"prefetch_bytes"`
	// Warm reads (long prefill passes: the next layer's experts read on a
	// guess), how many were asked for, and their bytes (in BytesRead too).
	Warmed    int64 `json:"warmed"`
	WarmHits  int64 `json:"warm_hits"`
	WarmBytes int64 `json:"warm_bytes"`
}

func expertReport(before, after expertcache.Stats, tokens int) *ExpertReport {
	r := &ExpertReport{
		Hits: after.Hits - before.Hits, Misses: after.Misses - before.Misses, BytesRead: after.BytesRead - before.BytesRead,
		ReadSeconds: after.ReadSeconds - before.ReadSeconds, WaitSeconds: after.WaitSeconds - before.WaitSeconds,
		SlotsPerLayer: after.SlotsPerLayer, BudgetBytes: after.BudgetBytes, IOMode: after.Mode, IOThreads: after.IOThreads,
		Prefetched: after.Prefetched - before.Prefetched, PrefetchHits: after.PrefetchHits - before.PrefetchHits,
		PrefetchBytes: after.PrefetchBytes - before.PrefetchBytes,
		Warmed:        after.Warmed - before.Warmed, WarmHits: after.WarmHits - before.WarmHits, WarmBytes: after.WarmBytes - before.WarmBytes,
	}
	if n := r.Hits + r.Misses; n > 0 {
		r.HitRate = float64(r.Hits) / float64(n)
	}
	if r.ReadSeconds > 0 { // demand reads only: speculative ones overlap compute
		r.ReadRate = float64(r.BytesRead-r.PrefetchBytes-r.WarmBytes) / r.ReadSeconds
	}
	if tokens > 0 {
		r.BytesPerToken = float64(r.BytesRead) / float64(tokens)
	}
	return r
}

// Generate feeds promptIDs after whatever the session already holds and
// generates up to MaxTokens tokens.
func (s *Session) Generate(ctx context.Context, promptIDs []int, opt GenerateOptions) (*Result, error) {
	if s.err != nil {
		return nil, s.err
	}
	if len(promptIDs) == 0 && len(s.pending) == 0 && s.Len() == 0 {
		return nil, fmt.Errorf("empty prompt")
	}
	sampler, err := sample.New(opt.Sampling)
	if err != nil {
		return nil, err
	}
	if held, limit := s.Len()+len(s.pending), s.maxContext(); held+len(promptIDs) > limit {
		return nil, fmt.Errorf("the prompt has %d tokens and the session already holds %d, more than the context limit of %d tokens; shorten the prompt or raise --max-context (this model allows %d)",
			len(promptIDs), held, limit, s.e.cfg.MaxContext)
	}
	res := &Result{PromptIDs: slices.Clone(promptIDs), IDs: []int{}}
	before := s.e.ExpertStats()
	defer func() {
		if s.e.cache != nil {
			res.Experts = expertReport(before, s.e.ExpertStats(), len(res.PromptIDs)+len(res.IDs))
		}
		res.PeakRSS, _ = expertcache.PeakRSS()
	}()
	start := time.Now()
	feed := append(s.pending, promptIDs...)
	res.PrefillChunk = opt.PrefillChunk
	if res.PrefillChunk <= 0 {
		res.PrefillChunk = s.e.PrefillChunk(len(feed))
	}
	if err := s.prefill(ctx, feed, res.PrefillChunk); err != nil {
		return nil, err
	}
	s.pending = nil
	res.PrefillSecs = time.Since(start).Seconds()
	res.PrefillTokS = float64(len(promptIDs)) / max(res.PrefillSecs, 1e-9)
	return res, s.decode(ctx, sampler, opt, res)
}

// prefill feeds ids in passes of chunk tokens. Each pass is its own
// Forward so a cancelled context stops between passes.
func (s *Session) prefill(ctx context.Context, ids []int, chunk int) error {
	if chunk <= 0 {
		chunk = s.e.PrefillChunk(len(ids))
	}
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(chunk, len(ids))
		if err := s.forwardPass(ids[:n]); err != nil {
			return err
		}
		// The pending token leads the first pass: once fed it is no longer
		// pending, even if a later pass is cancelled.
		s.pending = nil
		ids = ids[n:]
	}
	return nil
}

// PrefillChunk is the pass length Generate prefills a prompt of tokens
// tokens in: passes as long as the scratch budget allows, so each
// streamed expert is read once per long pass instead of once per 256
// tokens, and the batched kernels reuse each weight over more tokens
// even when every expert is resident (docs/prefill.md).
func (e *Engine) PrefillChunk(tokens int) int {
	if e.backend != nil {
		if c, ok := e.backend.(PassBackend); ok {
			return c.PrefillChunk() // the backend's own pass length
		}
		return 256 // a backend splits its own passes
	}
	scratch := int64(qwen35.PrefillScratchBudget)
	if st := e.ExpertStats(); e.cache != nil && st.SlotsPerLayer < e.Install.Manifest.Geometry.NumExperts {
		scratch = qwen35.PassScratchBudget(st.BudgetBytes)
	}
	return e.Model.Config().PrefillChunk(tokens, scratch)
}

func (s *Session) decode(ctx context.Context, sampler *sample.Sampler, opt GenerateOptions, res *Result) error {
	stream := s.e.Tokenizer.NewStreamDecoder(tokenizer.DecodeOptions{})
	start, steps := time.Now(), 0
	var text []byte
	emit := func(id int, t string) {
		text = append(text, t...)
		if opt.OnToken != nil {
			opt.OnToken(id, t)
		}
	}
	res.StopReason = "max_tokens"
	for len(res.IDs) < opt.MaxTokens {
		if err := ctx.Err(); err != nil {
			return err
		}
		id, err := s.next(sampler, opt)
		if err != nil {
			return err
		}
		ended, err := advance(opt.Constraint, id)
		if err != nil {
			return err
		}
		res.IDs = append(res.IDs, id)
		if ended || !opt.IgnoreEOS && slices.Contains(opt.StopIDs, id) {
			// The stop token ends the text; its id is kept, its text is not shown.
			s.pending, res.StopReason = []int{id}, "eos"
			break
		}
		piece := stream.Push(id)
		emit(id, piece)
		if opt.StopAfter != nil && opt.StopAfter(id, piece) {
			s.pending, res.StopReason = []int{id}, "callback"
			break
		}
		if len(res.IDs) == opt.MaxTokens || s.Len() == s.maxContext() {
			s.pending = []int{id}
			if len(res.IDs) < opt.MaxTokens {
				res.StopReason = "context_full"
			}
			break
		}
		if err := s.forwardOne(id); err != nil {
			return err
		}
		steps++
	}
	if rest := stream.Flush(); rest != "" {
		emit(-1, rest)
	}
	res.Text = string(text)
	res.DecodeSecs = time.Since(start).Seconds()
	res.DecodeTokS = float64(steps) / max(res.DecodeSecs, 1e-9)
	return nil
}

// forwardOne feeds one decoded token, telling the route trace its position.
func (s *Session) forwardOne(id int) error {
	if t := s.e.trace; t != nil {
		t.position, t.decoding = s.state.Len(), true
		defer func() { t.decoding = false }()
	}
	return s.forward([]int{id})
}

// forwardPass feeds one prefill pass: a backend takes it whole, the CPU
// model in internal 256-token pieces (qwen35.ForwardChunked).
func (s *Session) forwardPass(ids []int) error {
	if s.bs != nil {
		return s.bs.Forward(ids)
	}
	return s.e.Model.ForwardChunked(s.state, ids, s.logits, false, len(ids))
}

// forward feeds ids to whichever engine holds the session.
func (s *Session) forward(ids []int) error {
	if s.bs != nil {
		return s.bs.Forward(ids)
	}
	return s.e.Model.Forward(s.state, ids, s.logits, false)
}

// next picks the next token. A backend picks it where its logits are when
// it can, so only the id comes back; otherwise its logits are copied here
// for the sampler (the same token: the backend computes Finish).
func (s *Session) next(sampler *sample.Sampler, opt GenerateOptions) (int, error) {
	if opt.OnStep != nil {
		if err := opt.OnStep(); err != nil {
			return 0, err
		}
	}
	if s.bs == nil || opt.OnLogits != nil || opt.Constraint != nil {
		if s.bs != nil {
			if err := s.bs.Logits(s.logits); err != nil {
				return 0, err
			}
		}
		return s.sampleRow(sampler, opt)
	}
	st := sampler.Next()
	id, ok, err := s.sampleOnBackend(st, sampler)
	if err != nil {
		return 0, err
	}
	if !ok {
		if err := s.bs.Logits(s.logits); err != nil {
			return 0, err
		}
		if id, err = sampler.Finish(st, s.logits); err != nil {
			return 0, err
		}
	}
	sampler.Accept(id)
	return id, nil
}

// sampleRow picks from the logits copied here, after the constraint's mask
// and the OnLogits hook.
func (s *Session) sampleRow(sampler *sample.Sampler, opt GenerateOptions) (int, error) {
	if opt.Constraint != nil && opt.Constraint.Mask(s.logits) == 0 {
		return 0, fmt.Errorf("runtime: %w", ErrConstraintDeadEnd)
	}
	if opt.OnLogits != nil {
		if err := opt.OnLogits(s.logits); err != nil {
			return 0, err
		}
	}
	return sampler.Sample(s.logits)
}

// sampleOnBackend picks st's token on the backend: greedy by its argmax,
// anything else when it is a SamplingState; ok false: the row is needed.
func (s *Session) sampleOnBackend(st sample.Step, sampler *sample.Sampler) (id int, ok bool, err error) {
	if st.Temperature == 0 && !st.Penalized() {
		id, err = s.bs.Argmax()
		return id, err == nil, err
	}
	ss, can := s.bs.(SamplingState)
	if !can {
		return 0, false, nil
	}
	return ss.Sample(st, sampler.History())
}

// advance moves c past the picked token (no constraint: nothing ends).
func advance(c Constraint, id int) (ended bool, err error) {
	if c == nil {
		return false, nil
	}
	if ended, err = c.Advance(id); err != nil {
		return false, fmt.Errorf("runtime: the output constraint refused token %d: %w", id, err)
	}
	return ended, nil
}

func (s *Session) maxContext() int {
	if s.bs != nil {
		return s.bs.MaxContext()
	}
	return s.state.MaxContext()
}

// Close releases the session's backend memory (nothing for the CPU engine).
func (s *Session) Close() {
	if s.bs != nil {
		s.bs.Close()
	}
}

// ExpertStats reports the expert cache's counters (zero for dense models).
func (e *Engine) ExpertStats() expertcache.Stats {
	if e.cache == nil {
		return expertcache.Stats{}
	}
	return e.cache.Stats()
}

// Len is the number of tokens the session's model state holds.
func (s *Session) Len() int {
	if s.bs != nil {
		return s.bs.Len()
	}
	return s.state.Len()
}

// Prefill feeds ids (after any pending token) without generating, so a
// caller can prefill in segments and take a Snapshot between them. The
// next Generate continues from the logits of the last token fed.
func (s *Session) Prefill(ctx context.Context, ids []int, chunk int) error {
	if held, limit := s.Len()+len(s.pending), s.maxContext(); held+len(ids) > limit {
		return fmt.Errorf("the prompt has %d tokens and the session already holds %d, more than the context limit of %d tokens", len(ids), held, limit)
	}
	if err := s.prefill(ctx, append(slices.Clone(s.pending), ids...), chunk); err != nil {
		return err
	}
	s.pending = nil
	return nil
}

// Reset empties the session.
func (s *Session) Reset() {
	s.pending = nil
	if s.bs != nil {
		s.bs.Close()
		s.bs, s.err = s.e.backend.NewState(s.opt)
		return
	}
	s.state.Reset()
	s.pending = nil
}

// Snapshot is a copy of a session's model state at one position. The
// Gated DeltaNet state summarises every token so far and cannot be
// truncated, so resuming a conversation needs a copy taken exactly where
// it resumes.
type Snapshot struct {
	state   *qwen35.State
	q38     *qwen38.State // instead of state for a qwen4_exp session
	pending []int
	bytes   int64
}

// Snapshot copies the session's state (a session after Generate holds its
// last sampled token as pending; the snapshot keeps it).
// Its KV storage holds exactly the written tokens (a Clone would keep the
// session's whole capacity), so Bytes is what it occupies.
//
// A session on a backend (the GPU engine) has no snapshots yet: nil.
func (s *Session) Snapshot() *Snapshot {
	if qs, ok := s.bs.(*q38State); ok {
		return qs.snapshot(s.pending)
	}
	if s.bs != nil {
		return nil
	}
	n := s.state.Len()
	bits := s.state.KVBits()
	st := s.e.Model.NewState(qwen35.StateOptions{KVInitial: max(n, 1), MaxContext: s.state.MaxContext(), KVBits: bits})
	if err := st.CopyFrom(s.state); err != nil {
		panic(err) // same model and width, n ≤ MaxContext: cannot fail
	}
	return &Snapshot{state: st, pending: slices.Clone(s.pending), bytes: s.e.Model.Config().StateBytesAt(max(n, 1), bits)}
}

// Restore makes the session an exact copy of snap, taken from a session of
// the same engine.
func (s *Session) Restore(snap *Snapshot) error {
	if qs, ok := s.bs.(*q38State); ok && snap != nil && snap.q38 != nil {
		if err := qs.restore(snap.q38); err != nil {
			return err
		}
		s.pending = slices.Clone(snap.pending)
		return nil
	}
	if s.bs != nil || snap == nil || snap.state == nil {
		return fmt.Errorf("runtime: this session cannot restore a snapshot (the GPU engine keeps none yet)")
	}
	if err := s.state.CopyFrom(snap.state); err != nil {
		return err
	}
	s.pending = slices.Clone(snap.pending)
	return nil
}

// Len is the number of tokens the snapshot stands for (its pending one included).
func (sn *Snapshot) Len() int {
	if sn.q38 != nil {
		return sn.q38.Len() + len(sn.pending)
	}
	return sn.state.Len() + len(sn.pending)
}

// Bytes is the memory the snapshot's written state occupies.
func (sn *Snapshot) Bytes() int64 { return sn.bytes }
