package runtime

import (
	"cmp"
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
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// Options configures loading.
type Options struct {
	Threads int // compute threads; default all cores
	Experts ExpertOptions
	// Device is where the model runs: "" or model.CPU for this machine's
	// cores, model.GPU for the GPU engine (registered by importing
	// pkg/gpu). The tokenizer and sampling stay here.
	Device string
	// RopeScaling "yarn" extends the model's context to MaxContext tokens
	// (2x or 4x; 0 = 4x); "" or "none" keeps its own.
	RopeScaling string
	MaxContext  int
	// VRAMBudget is the device memory the GPU engine may take (0: auto,
	// the free memory less a reserve); experts that do not fit stream from
	// pinned RAM (docs/gpu.md).
	VRAMBudget int64
	// KVBits is the sessions' KV width (0: model.DefaultKVBits), which the
	// GPU engine's plan counts one sequence at; each session still sets
	// its own (SessionOptions.KVBits).
	KVBits int
}

// Engine is a loaded model ready to generate.
type Engine struct {
	Install    *Install
	Tokenizer  *tokenizer.Tokenizer
	Generation *hf.GenerationConfig // nil when the install has no generation_config.json
	pool       *kernels.Pool
	cache      *expertcache.Cache // nil for dense models and engines that hold their experts
	trace      *tracedExperts     // set when NVMAI_ROUTE_TRACE names a file
	counted    *countedExperts    // the cache's requests as the model sees them, counted by layer in a bench
	experts    interface{ Close() error }
	model      model.Model
	info       model.Info
}

// Model is the loaded model, as the engine surface.
func (e *Engine) Model() model.Model { return e.model }

// Info describes the loaded model: its engine's name, vocabulary, context
// (YaRN's when applied) and rotary scaling.
func (e *Engine) Info() model.Info { return e.info }

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
	device := cmp.Or(opt.Device, model.CPU)
	entry, err := model.Lookup(m.Architecture, device)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	// The geometry and rotary scaling are checked before any expert slot
	// is mapped.
	if _, err := entry.Footprint(model.FootprintRequest{Manifest: m, RopeScaling: opt.RopeScaling, MaxContext: opt.MaxContext, Threads: 1}); err != nil {
		return err
	}
	req := model.Request{Dir: dir, Manifest: m, Weights: e.Install, RopeScaling: opt.RopeScaling, MaxContext: opt.MaxContext,
		VRAMBudget: opt.VRAMBudget, RAMBudget: opt.Experts.Budget, KVBits: opt.KVBits}
	if x := m.Experts; x != nil && opt.Experts.Slots > 0 {
		req.RAMBudget = int64(opt.Experts.Slots) * x.Stride * int64(len(x.Layers))
	}
	if m.Experts != nil && !entry.HoldsExperts {
		if e.cache, err = openExperts(e.Install, opt.Experts); err != nil {
			return err
		}
		e.experts, req.Experts = e.cache, e.cache
		if p := os.Getenv(RouteTraceEnv); p != "" {
			if e.trace, err = newTracedExperts(e.cache, p); err != nil {
				return err
			}
			e.experts, req.Experts = e.trace, e.trace
		}
		next := expertRequests(e.cache)
		if e.trace != nil {
			next = e.trace
		}
		e.counted = newCountedExperts(e.cache, next, m.Geometry.NumLayers)
		e.experts, req.Experts = e.counted, e.counted
		if st := e.cache.Stats(); st.SlotsPerLayer < m.Geometry.NumExperts {
			req.StreamedExpertBytes = st.BudgetBytes
		}
	}
	threads := opt.Threads
	if device != model.CPU {
		threads = 1 // the device computes; the pool serves the bench's memory probes
	}
	e.pool = kernels.NewPool(threads)
	req.Pool = e.pool
	if e.model, err = entry.Load(req); err != nil {
		return err
	}
	e.info = e.model.Info()
	return nil
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
	if e.model != nil {
		e.model.Close()
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
	entry, err := model.Lookup(m.Architecture, model.CPU)
	if err != nil {
		return sample.Params{}, 0, err
	}
	f, err := entry.Footprint(model.FootprintRequest{Manifest: m, Threads: 1})
	if err != nil {
		return sample.Params{}, 0, err
	}
	return samplingDefaults(g), f.MaxContext, nil
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
	st      model.State
	err     error // the engine could not start the session's state
	pending []int // sampled but not yet fed to the model (the last stop token)
	opt     SessionOptions
	// What the state can do, found once when it starts: a row read in
	// place, or copied into logits; sampling where the row is.
	host    model.HostLogits
	sampler model.Sampler
	logits  []float32
}

// SessionOptions sizes a session's KV cache.
type SessionOptions struct {
	KVInitial  int // starting KV capacity in tokens (default 8192)
	MaxContext int // most tokens the session may hold (default the model's maximum)
	KVBits     int // KV cache width, 8, 16 or 32 (default model.DefaultKVBits)
	// StepProfile, when set, receives the phase times of the session's
	// decode steps (model.Profiler; nvmai-run bench reports them).
	StepProfile *model.StepProfile
	// Routing, when set, names every token's experts in place of the
	// router's (model.RouteOverrider: serve replaying a routing regime for
	// a benchmark). A state that cannot take it is the session's error.
	Routing model.RouteOverride
}

// NewSession starts an empty conversation. A state the engine cannot make
// (device memory) is reported by the session's first Generate.
func (e *Engine) NewSession(opt SessionOptions) *Session {
	s := &Session{e: e, opt: opt}
	s.start()
	return s
}

// start makes the session's state and finds what it can do.
func (s *Session) start() {
	s.st, s.err = s.e.model.NewState(model.StateOptions{KVInitial: s.opt.KVInitial, MaxContext: s.opt.MaxContext, KVBits: s.opt.KVBits})
	if s.err != nil {
		s.st = nil
		return
	}
	if s.opt.Routing != nil {
		o, ok := s.st.(model.RouteOverrider)
		if !ok {
			s.st.Close()
			s.st, s.err = nil, s.e.routingRefusal()
			return
		}
		o.SetRouteOverride(s.opt.Routing)
	}
	s.host, _ = s.st.(model.HostLogits)
	s.sampler, _ = s.st.(model.Sampler)
	if p, ok := s.st.(model.Profiler); ok {
		p.SetStepProfile(s.opt.StepProfile)
	}
	if s.host == nil && s.logits == nil {
		s.logits = make([]float32, s.e.info.VocabSize)
	}
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
			len(promptIDs), held, limit, s.e.info.MaxContext)
	}
	res := &Result{PromptIDs: slices.Clone(promptIDs), IDs: []int{}}
	before := s.e.ExpertStats()
	defer func() {
		if s.e.cache != nil || s.e.streamsExperts() {
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
// tokens in: the model's own (model.PassSizer: on the CPU, passes as long
// as the scratch budget allows, so each streamed expert is read once per
// long pass and the batched kernels reuse each weight over more tokens,
// docs/prefill.md), else model.DefaultPass.
func (e *Engine) PrefillChunk(tokens int) int {
	if p, ok := e.model.(model.PassSizer); ok {
		return p.PassLength(tokens)
	}
	return model.DefaultPass
}

func (s *Session) decode(ctx context.Context, sampler *sample.Sampler, opt GenerateOptions, res *Result) error {
	d := s.newDecoder(sampler, opt, res)
	for {
		id, feed, err := d.Next(ctx)
		if err != nil || !feed {
			return err
		}
		if err := d.Feed(id); err != nil {
			return err
		}
	}
}

// forwardOne feeds one decoded token, telling the route trace its position.
func (s *Session) forwardOne(id int) error {
	if t := s.e.trace; t != nil {
		t.position, t.decoding = s.st.Len(), true
		defer func() { t.decoding = false }()
	}
	return s.st.Forward([]int{id})
}

// forwardPass feeds one prefill pass; the state takes it whole.
func (s *Session) forwardPass(ids []int) error { return s.st.Forward(ids) }

// row is the last row of logits: the state's own when it lives in host
// memory, else a copy.
func (s *Session) row() ([]float32, error) {
	if s.host != nil {
		return s.host.LastLogits(), nil
	}
	if err := s.st.Logits(s.logits); err != nil {
		return nil, err
	}
	return s.logits, nil
}

// next picks the next token. A state whose row lives elsewhere (a device)
// picks it there when it can, so only the id comes back; otherwise the row
// is copied here for the sampler (the same token: the state computes
// Finish).
func (s *Session) next(sampler *sample.Sampler, opt GenerateOptions) (int, error) {
	if opt.OnStep != nil {
		if err := opt.OnStep(); err != nil {
			return 0, err
		}
	}
	if s.host != nil || opt.OnLogits != nil || constrained(opt.Constraint) {
		row, err := s.row()
		if err != nil {
			return 0, err
		}
		return s.sampleRow(sampler, opt, row)
	}
	st := sampler.Next()
	id, ok, err := s.sampleOnDevice(st, sampler)
	if err != nil {
		return 0, err
	}
	if !ok {
		row, err := s.row()
		if err != nil {
			return 0, err
		}
		if id, err = sampler.Finish(st, row); err != nil {
			return 0, err
		}
	}
	sampler.Accept(id)
	return id, nil
}

// sampleRow picks from the logits copied here, after the constraint's mask
// and the OnLogits hook.
func (s *Session) sampleRow(sampler *sample.Sampler, opt GenerateOptions, row []float32) (int, error) {
	if constrained(opt.Constraint) && opt.Constraint.Mask(row) == 0 {
		return 0, fmt.Errorf("runtime: %w", ErrConstraintDeadEnd)
	}
	if opt.OnLogits != nil {
		if err := opt.OnLogits(row); err != nil {
			return 0, err
		}
	}
	return sampler.Sample(row)
}

// sampleOnDevice picks st's token where the row is: greedy by the state's
// argmax, anything else when it is a model.Sampler; ok false: the row is
// needed.
func (s *Session) sampleOnDevice(st sample.Step, sampler *sample.Sampler) (id int, ok bool, err error) {
	if st.Temperature == 0 && !st.Penalized() {
		id, err = s.st.Argmax()
		return id, err == nil, err
	}
	if s.sampler == nil {
		return 0, false, nil
	}
	return s.sampler.Sample(st, sampler.History())
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

func (s *Session) maxContext() int { return s.st.MaxContext() }

// Close releases the session's device memory (nothing for the CPU engine).
func (s *Session) Close() {
	if s.st != nil {
		s.st.Close()
	}
}

// ExpertStats reports the expert cache's counters (zero for dense models).
func (e *Engine) ExpertStats() expertcache.Stats {
	if e.cache == nil {
		// An engine that streams experts itself (the GPU's VRAM slots)
		// reports them the same way.
		if s, ok := e.model.(interface{ ExpertStats() expertcache.Stats }); ok {
			return s.ExpertStats()
		}
		return expertcache.Stats{}
	}
	return e.cache.Stats()
}

// ExpertStatsByLayer reports the expert cache's counters and each layer's
// hits and misses, taken together (zero and nil for dense models).
func (e *Engine) ExpertStatsByLayer() (expertcache.Stats, []expertcache.LayerStats) {
	if e.cache == nil {
		// The GPU's VRAM slots, as in ExpertStats, from one read.
		if s, ok := e.model.(interface {
			ExpertStatsByLayer() (expertcache.Stats, []expertcache.LayerStats)
		}); ok {
			return s.ExpertStatsByLayer()
		}
		return expertcache.Stats{}, nil
	}
	return e.cache.StatsByLayer()
}

// Len is the number of tokens the session's model state holds.
func (s *Session) Len() int {
	if s.st == nil {
		return 0 // the state could not be made (s.err)
	}
	return s.st.Len()
}

// Prefill feeds ids (after any pending token) without generating, so a
// caller can prefill in segments and take a Snapshot between them. The
// next Generate continues from the logits of the last token fed.
func (s *Session) Prefill(ctx context.Context, ids []int, chunk int) error {
	if s.err != nil {
		return s.err
	}
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
	if r, ok := s.st.(model.Resetter); ok {
		r.Reset()
		return
	}
	s.Close()
	s.start()
}

// Snapshot is a copy of a session's model state at one position. The
// Gated DeltaNet state summarises every token so far and cannot be
// truncated, so resuming a conversation needs a copy taken exactly where
// it resumes.
type Snapshot struct {
	snap    model.Snapshot
	pending []int
}

// Snapshot copies the session's state (a session after Generate holds its
// last sampled token as pending; the snapshot keeps it). The copy holds
// exactly the written tokens, so Bytes is what it occupies.
//
// A session whose engine keeps no snapshots (model.Snapshotter), or whose
// copy failed, gives nil.
func (s *Session) Snapshot() *Snapshot {
	sn, ok := s.st.(model.Snapshotter)
	if !ok {
		return nil
	}
	snap, err := sn.Snapshot()
	if err != nil {
		return nil
	}
	return &Snapshot{snap: snap, pending: slices.Clone(s.pending)}
}

// Restore makes the session an exact copy of snap, taken from a session of
// the same engine.
func (s *Session) Restore(snap *Snapshot) error {
	sn, ok := s.st.(model.Snapshotter)
	if !ok || snap == nil || snap.snap == nil {
		return fmt.Errorf("runtime: this session cannot restore a snapshot (the %s engine keeps none yet)", s.e.info.Name)
	}
	if err := sn.Restore(snap.snap); err != nil {
		return err
	}
	s.pending = slices.Clone(snap.pending)
	return nil
}

// DiskSnapshots reports whether the session's snapshots can be written to
// disk and read back (Snapshot.WriteTo, ReadSnapshot).
func (s *Session) DiskSnapshots() bool {
	_, ok := s.st.(model.SnapshotReader)
	return ok
}

// Len is the number of tokens the snapshot stands for (its pending one included).
func (sn *Snapshot) Len() int { return sn.snap.Len() + len(sn.pending) }

// Bytes is the memory the snapshot's written state occupies.
func (sn *Snapshot) Bytes() int64 { return sn.snap.Bytes() }
