package runtime

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/internal/hugemem"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/sample"
)

// BenchPrompt is one fixed prompt of the benchmark.
type BenchPrompt struct {
	Name string
	Text string
	IDs  []int // when set, the prompt's token ids (Text is then not used)
}

// BenchPrompts are the benchmark's fixed prompts: a counting, a prose and a
// code prompt, so routing sees a repetitive, a natural and a structured text.
var BenchPrompts = []BenchPrompt{
	{Name: "counting", Text: "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,"},
	{Name: "prose", Text: "The old lighthouse keeper climbed the spiral stairs one last time. Outside, the storm " +
		"had finally passed, and the sea lay flat and grey under a sky the colour of pewter. He thought"},
	{Name: "code", Text: "// fib returns the n-th Fibonacci number.\nfunc fib(n int) int {\n\tif n < 2 {\n\t\treturn n\n\t}\n" +
		"\treturn fib(n-1) + fib(n-2)\n}\n\n// primes returns the primes below n, by the sieve of Eratosthenes.\nfunc primes(n int) []int {\n"},
}

// BenchOptions configures Engine.Bench.
type BenchOptions struct {
	Tokens       int           // tokens generated per prompt, greedy, EOS ignored (default 512)
	PromptTokens int           // when positive, every prompt is repeated or cut to exactly this many tokens
	Prompts      []BenchPrompt // default BenchPrompts
	// Warmup, when positive, first prefills a throwaway session with this
	// many pseudo-random tokens, so the expert cache starts warm (512 random
	// tokens reach every expert of a 256-expert layer with near certainty).
	Warmup int
	// CPUProfile, when set, receives a CPU profile of the first prompt's
	// decode steps only (no load, no prefill); PrefillCPUProfile one of the
	// first prompt's prefill.
	CPUProfile, PrefillCPUProfile string
	// MemBandwidthBytes is the buffer the memory-read measurement sums
	// (default 512 MiB, far beyond any last-level cache); negative skips it.
	MemBandwidthBytes int64
	// DiskReads is how many random experts the raw read measurement reads
	// (default 256); negative skips it. Dense models skip it.
	DiskReads int
	// PrefillChunk is the prefill's pass length; 0 lets the engine pick
	// (Engine.PrefillChunk). scripts/prefill-ab.sh compares the two.
	PrefillChunk int
	// OnPrompt, when set, is told as each prompt starts (run nil) and
	// ends, so a long benchmark can show its progress.
	OnPrompt func(index, total int, name string, run *BenchRun)
	// KVBits is the sessions' KV width (default model.DefaultKVBits).
	KVBits int
	// FillContext, when positive, puts synthetic KV rows before each prompt
	// (qwen35.State.FillSynthetic) so that prompt and generated tokens end
	// the context at exactly this many tokens: it measures the memory and
	// attention cost of a long context without prefilling it, not quality.
	FillContext int
	// Routing, when set, names every prompt token's and decode step's
	// experts in each MoE layer in place of the router's top-k (a replayed
	// trace or a synthetic regime, pkg/routing); the rest of the forward is
	// unchanged. Each prompt's run counts its positions from 0 at its first
	// prompt token (after FillContext's rows). The warm-up keeps the
	// router's own routing. Nil: the router's own (near uniform on a
	// random-weight install).
	Routing routing.Source
}

// UniformRouting is the report's routing source when the router picks.
const UniformRouting = "uniform"

// BenchRun is one prompt's measurement.
type BenchRun struct {
	Prompt       string  `json:"prompt"`
	PromptTokens int     `json:"prompt_tokens"`
	Generated    int     `json:"generated_tokens"`
	PrefillTokS  float64 `json:"prefill_tok_s"`
	// DecodeTokS is decode steps per second: Generated tokens take
	// Generated-1 steps, since the first token comes from the prefill.
	DecodeTokS float64 `json:"decode_tok_s"`
	// Decode-only expert cache figures (prefill excluded).
	HitRate       float64 `json:"hit_rate"`
	Misses        int64   `json:"misses"`
	BytesPerToken float64 `json:"bytes_read_per_token"` // bytes read from disk per decode step
	ReadRate      float64 `json:"read_bytes_per_s"`     // while reads were in flight
	IOWaitPerTok  float64 `json:"io_wait_s_per_token"`
	PeakRSS       int64   `json:"peak_rss_bytes"` // of the process so far
	// Experts read ahead on a guess per decode step, and the share of them
	// the step then asked for.
	GuessesPerToken float64 `json:"guesses_per_token"`
	GuessesUsed     float64 `json:"guesses_used"`
	// StateBytesPerToken is the sequence state one decode step reads, on
	// average over the steps: the K and V of every full-attention layer up
	// to the current position and every Gated DeltaNet layer's conv window
	// and recurrent matrix (qwen35.Config.StateBytes).
	StateBytesPerToken float64 `json:"state_bytes_per_token"`
	// NgramBytesPerToken is the n-gram table bytes a decode step read from
	// SSD (qwen4_exp installs only): whole aligned pages in the bounded
	// read modes, the rows' own bytes with NVMAI_BOUNDED_IO=0.
	// NgramRowsPerToken is the rows it took (NgramRowBytes each), and
	// NgramWaitPerTok the time its PLE layers waited for them: what the
	// read ahead, started before the step's first layer, did not hide.
	NgramBytesPerToken float64 `json:"ngram_bytes_read_per_token,omitempty"`
	NgramRowsPerToken  float64 `json:"ngram_rows_per_token,omitempty"`
	NgramRowBytes      int64   `json:"ngram_row_bytes,omitempty"`
	NgramWaitPerTok    float64 `json:"ngram_wait_s_per_token,omitempty"`
	// PrefillNgramBytes is the n-gram bytes the prefill read.
	PrefillNgramBytes int64 `json:"prefill_ngram_bytes_read,omitempty"`
	// HandoffsPerToken is how many products or loops per decode step the
	// compute pool split across its threads (each a wake-up and a barrier).
	HandoffsPerToken float64 `json:"handoffs_per_token"`
	// ParksPerToken is how many times per decode step a pool thread gave
	// up spinning and parked (each a slow wake-up later).
	ParksPerToken float64 `json:"parks_per_token"`
	// The prefill's expert cache figures.
	PrefillHitRate   float64 `json:"prefill_hit_rate"`
	PrefillBytesRead int64   `json:"prefill_bytes_read"`
	PrefillIOWait    float64 `json:"prefill_io_wait_s"`
	// PrefillChunk is the prefill's pass length, PrefillBytesPerToken its
	// expert bytes read per prompt token, and PrefillComputeTokS the prompt
	// tokens over the prefill time less its I/O wait: the rate were every
	// read free (an estimate, not a run with every expert resident).
	PrefillChunk         int     `json:"prefill_chunk"`
	PrefillBytesPerToken float64 `json:"prefill_bytes_read_per_token"`
	PrefillComputeTokS   float64 `json:"prefill_compute_bound_tok_s"`
	// PrefillWarmBytes are the prefill's warm reads (the next layer's
	// experts read on a guess, in PrefillBytesRead too), PrefillWarmUsed
	// those of them its visits asked for; the rest were wasted (or stay
	// resident, not asked for yet).
	PrefillWarmBytes int64 `json:"prefill_warm_bytes"`
	PrefillWarmUsed  int64 `json:"prefill_warm_used_bytes"`
	// The decode's hit rate of the MoE layer that hit least and most
	// (HitRate is over all of them); NewExpertsPerLayerToken the experts a
	// layer's step asked for that were not resident (read on demand), per
	// layer per step; WaitsPerToken the layers per step that waited for at
	// least one read (a miss, or a guess still in flight).
	LayerHitRateMin         float64 `json:"hit_rate_layer_min"`
	LayerHitRateMax         float64 `json:"hit_rate_layer_max"`
	NewExpertsPerLayerToken float64 `json:"new_experts_per_layer_token"`
	WaitsPerToken           float64 `json:"waits_per_token"`
}

// BenchReport is a whole benchmark: labels, every prompt and their median.
type BenchReport struct {
	Engine        string `json:"engine"` // nvmai and the integer kernel this CPU runs
	Model         string `json:"model"`
	ModelID       string `json:"model_id"`
	Layers        int    `json:"layers"`
	Width         int    `json:"width_bits"`
	BudgetBytes   int64  `json:"budget_bytes"`
	SlotsPerLayer int    `json:"slots_per_layer"`
	Experts       int    `json:"experts_per_layer"`
	IOMode        string `json:"io_mode"`
	IOThreads     int    `json:"io_threads"`
	Prefetch      int    `json:"prefetch"` // experts per layer read ahead on a guess
	Threads       int    `json:"threads"`
	CPU           string `json:"cpu"`
	// Routing is where the experts came from: UniformRouting (the router),
	// "trace FILE sha256 HEX" or "synthetic REGIME seed=N";
	// RoutingWrapped says a trace repeated to cover a run.
	Routing        string     `json:"routing"`
	RoutingWrapped bool       `json:"routing_wrapped,omitempty"`
	Runs           []BenchRun `json:"runs"`
	Median         BenchRun   `json:"median"`

	// WeightBytesPerToken is what one decode step reads from memory: every
	// resident matrix but the embedding (one row), and top-k experts per
	// MoE layer. WeightRate is that over the median time per token.
	WeightBytesPerToken int64   `json:"weight_bytes_per_token"`
	WeightRate          float64 `json:"weight_bytes_per_s"`
	// ReadRate adds the median state bytes per token (BenchRun
	// StateBytesPerToken) to the weights: all a decode step reads from
	// memory, over the median time per token.
	ReadRate float64 `json:"read_bytes_per_s"`
	// HugePageBytes is how much of the process's anonymous memory (expert
	// slots, resident weights) the kernel backed with huge pages after the
	// prompts; -1 when it does not say. See internal/hugemem.
	HugePageBytes int64 `json:"huge_page_bytes"`
	// MemRead is a plain sum of a large huge-page buffer on 1 … Threads
	// goroutines, measured in this process after the prompts (bytes/s,
	// median of memReadPasses); MemReadBest the best pass.
	MemRead     map[int]float64 `json:"mem_read_bytes_per_s,omitempty"`
	MemReadBest map[int]float64 `json:"mem_read_best_bytes_per_s,omitempty"`
	// WeightMemRead is a plain read of the weights' own memory as a decode
	// step reads it (Engine.WeightMemoryRates): median and best bytes/s.
	WeightMemRead     map[int]float64 `json:"weight_mem_read_bytes_per_s,omitempty"`
	WeightMemReadBest map[int]float64 `json:"weight_mem_read_best_bytes_per_s,omitempty"`
	// DiskRead is raw reads of random whole experts in the cache's IOMode
	// with IOThreads readers (bytes/s): the ceiling the expert cache's
	// misses are read at.
	DiskRead float64 `json:"disk_read_bytes_per_s,omitempty"`
	// DiskBound is, at the median, the bytes read per token (misses and
	// speculative reads) ÷ DiskRead over the measured time per token: 1
	// means decode runs at the disk's limit.
	DiskBound float64 `json:"disk_bound_ratio,omitempty"`
	// PrefillDiskTokS is DiskRead over the median prefill bytes per token:
	// the prefill rate were it only reading. PrefillBinding names the lower
	// of it and the median PrefillComputeTokS ("disk" or "compute").
	PrefillDiskTokS float64 `json:"prefill_disk_bound_tok_s,omitempty"`
	PrefillBinding  string  `json:"prefill_binding,omitempty"`
	// Phases splits the decode steps of every prompt by what they spend
	// their time on (model.StepProfile), in the model's order.
	Phases []BenchPhase `json:"phases"`
	// GPU is the backend's own report (pkg/gpu: device, copy
	// bandwidth, kernels per token, GEMV bandwidth), when one runs.
	GPU any `json:"gpu,omitempty"`
}

// BenchPhase is one phase of the decode steps: its time and the memory it
// reads per step, and the rate it reads that memory at.
type BenchPhase struct {
	Name            string  `json:"name"`
	SecondsPerToken float64 `json:"seconds_per_token"`
	Share           float64 `json:"share"` // of the profiled time
	BytesPerToken   float64 `json:"bytes_per_token"`
	Rate            float64 `json:"bytes_per_s"` // 0 for phases that read no weights or state
}

// benchPhases turns a profile into BenchPhases, leaving out phases that
// never ran (a dense model has no experts).
func benchPhases(p *model.StepProfile) []BenchPhase {
	if p.Steps == 0 {
		return nil
	}
	var total time.Duration
	for _, d := range p.Time {
		total += d
	}
	var out []BenchPhase
	for ph := range model.NumStepPhases {
		d := p.Time[ph]
		if d == 0 {
			continue
		}
		bp := BenchPhase{Name: ph.String(), SecondsPerToken: d.Seconds() / float64(p.Steps), Share: float64(d) / float64(total),
			BytesPerToken: float64(p.Bytes[ph]) / float64(p.Steps)}
		if p.Bytes[ph] > 0 {
			bp.Rate = float64(p.Bytes[ph]) / d.Seconds()
		}
		out = append(out, bp)
	}
	return out
}

// Bench generates greedily from every prompt in a fresh session and reports
// each prompt's prefill and decode rates and expert-cache figures, their
// median, and the machine's memory and raw disk read rates measured in the
// same process.
func (e *Engine) Bench(ctx context.Context, opt BenchOptions) (*BenchReport, error) {
	if opt.Tokens <= 0 {
		opt.Tokens = 512
	}
	if len(opt.Prompts) == 0 {
		opt.Prompts = BenchPrompts
	}
	r := e.benchLabels()
	r.Routing = UniformRouting
	if opt.Routing != nil {
		if err := e.canOverrideRouting(); err != nil {
			return nil, err
		}
		r.Routing = opt.Routing.Describe()
	}
	if e.counted != nil {
		e.counted.on = true
		defer func() { e.counted.on = false }()
	}
	if opt.Warmup > 0 {
		if err := e.benchWarmup(ctx, opt.Warmup); err != nil {
			return nil, err
		}
	}
	steps := new(model.StepProfile)
	for i, p := range opt.Prompts {
		ids, err := e.benchPromptIDs(p, opt.PromptTokens)
		if err != nil {
			return nil, err
		}
		var prof benchProfiles
		if i == 0 {
			prof = benchProfiles{prefill: opt.PrefillCPUProfile, decode: opt.CPUProfile}
		}
		if opt.OnPrompt != nil {
			opt.OnPrompt(i, len(opt.Prompts), p.Name, nil)
		}
		run, err := e.benchOne(ctx, p.Name, ids, opt.Tokens, opt.PrefillChunk, prof, steps, benchKV{bits: opt.KVBits, fill: opt.FillContext, routing: opt.Routing})
		if err != nil {
			return nil, fmt.Errorf("bench prompt %q: %w", p.Name, err)
		}
		if opt.OnPrompt != nil {
			opt.OnPrompt(i, len(opt.Prompts), p.Name, &run)
		}
		r.Runs = append(r.Runs, run)
	}
	r.Median = medianRun(r.Runs)
	r.RoutingWrapped = opt.Routing != nil && opt.Routing.Wrapped()
	r.Phases = benchPhases(steps)
	r.HugePageBytes = hugemem.ProcessHugeBytes()
	if r.Median.DecodeTokS > 0 {
		r.WeightRate = float64(r.WeightBytesPerToken) * r.Median.DecodeTokS
		r.ReadRate = (float64(r.WeightBytesPerToken) + r.Median.StateBytesPerToken) * r.Median.DecodeTokS
	}
	if opt.MemBandwidthBytes >= 0 {
		r.MemRead, r.MemReadBest = MemReadRates(opt.MemBandwidthBytes, r.Threads)
		r.WeightMemRead, r.WeightMemReadBest = e.WeightMemoryRates(r.Threads)
	}
	if e.cache != nil && opt.DiskReads >= 0 {
		rate, err := DiskReadRate(e.Install, opt.DiskReads, r.IOThreads, r.IOMode)
		if err != nil {
			return nil, err
		}
		r.DiskRead = rate
		if rate > 0 && r.Median.DecodeTokS > 0 {
			r.DiskBound = r.Median.BytesPerToken / rate * r.Median.DecodeTokS
		}
		r.PrefillDiskTokS, r.PrefillBinding = prefillLimits(rate, r.Median)
	}
	return r, nil
}

func (e *Engine) benchLabels() *BenchReport {
	m := e.Install.Manifest
	st := e.ExpertStats()
	r := &BenchReport{
		Engine: "nvmai/" + kernels.Implementation(), Model: filepath.Base(e.Install.Dir), ModelID: m.ModelID,
		Layers: m.Geometry.NumLayers, Width: m.Bits, BudgetBytes: st.BudgetBytes, SlotsPerLayer: st.SlotsPerLayer,
		Experts: m.Geometry.NumExperts, IOMode: st.Mode, IOThreads: st.IOThreads, Prefetch: st.PrefetchWidth, Threads: e.pool.Threads(),
		CPU: cpuName(), WeightBytesPerToken: DecodeWeightBytes(m),
	}
	if name := e.info.Name; name != model.CPU { // every CPU model runs on the CPU kernels: keep their name
		r.Engine = name
	}
	if g, ok := e.model.(interface{ BenchInfo() any }); ok {
		r.GPU = g.BenchInfo()
	}
	return r
}

// benchWarmup prefills a throwaway session with n pseudo-random token ids
// (fixed seed): varied tokens route to every expert, where a repeated prompt
// would keep to a few.
func (e *Engine) benchWarmup(ctx context.Context, n int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(e.Install.Manifest.Geometry.VocabSize)
	}
	sess := e.NewSession(SessionOptions{KVInitial: n + 1})
	if _, err := sess.Generate(ctx, ids, GenerateOptions{MaxTokens: 1, IgnoreEOS: true}); err != nil {
		return fmt.Errorf("bench warm-up: %w", err)
	}
	return nil
}

// benchPromptIDs encodes p; with n > 0 it repeats the text until it gives at
// least n tokens and keeps the first n.
func (e *Engine) benchPromptIDs(p BenchPrompt, n int) ([]int, error) {
	if p.IDs != nil {
		return repeatIDs(p.IDs, n), nil
	}
	ids := e.Tokenizer.Encode(p.Text)
	if len(ids) == 0 {
		return nil, fmt.Errorf("bench prompt %q encodes to no tokens", p.Name)
	}
	if n <= 0 {
		return ids, nil
	}
	text := p.Text
	for len(ids) < n {
		text += "\n" + p.Text
		ids = e.Tokenizer.Encode(text)
	}
	return ids[:n], nil
}

// repeatIDs repeats ids until there are n and keeps the first n (all of
// them when n ≤ 0).
func repeatIDs(ids []int, n int) []int {
	if n <= 0 {
		return ids
	}
	out := make([]int, n)
	for i := range out {
		out[i] = ids[i%len(ids)]
	}
	return out
}

// benchProfiles names the CPU profiles one prompt writes ("" for none).
type benchProfiles struct{ prefill, decode string }

// benchKV is a run's KV width, the context its synthetic rows fill to, and
// the routing its MoE layers replay (nil: the router's).
type benchKV struct {
	bits, fill int
	routing    routing.Source
}

// session starts a session for ids and tokens, its KV preallocated (no
// growth during the run) and filled with synthetic rows as asked.
func (kv benchKV) session(e *Engine, ids []int, tokens int, steps *model.StepProfile) (*Session, int, error) {
	rows := 0
	if kv.fill > 0 {
		if rows = kv.fill - len(ids) - tokens; rows < 0 {
			return nil, 0, fmt.Errorf("--fill-context %d is shorter than the %d prompt and %d generated tokens", kv.fill, len(ids), tokens)
		}
		// The last prompt's cache is garbage now; return it first, so
		// each prompt's peak RSS is its own cache's.
		debug.FreeOSMemory()
	}
	sess := e.NewSession(SessionOptions{KVInitial: rows + len(ids) + tokens + 1, KVBits: kv.bits, StepProfile: steps})
	if rows > 0 {
		f, ok := sess.st.(model.SyntheticFiller)
		if !ok {
			return nil, 0, fmt.Errorf("--fill-context needs the CPU engine: the %s engine keeps its own KV cache", e.info.Name)
		}
		if err := f.FillSynthetic(rows, 1); err != nil {
			return nil, 0, err
		}
	}
	if kv.routing != nil {
		o, ok := sess.st.(model.RouteOverrider)
		if !ok {
			return nil, 0, e.routingRefusal()
		}
		o.SetRouteOverride(shiftedRoutes{src: kv.routing, first: rows})
	}
	return sess, rows, nil
}

// benchOne runs one prompt in a fresh session. The expert counters are
// snapshotted when the first distribution is ready (prefill done), so the
// run's cache figures split into the prefill's and the decode's.
func (e *Engine) benchOne(ctx context.Context, name string, ids []int, tokens, chunk int, prof benchProfiles, steps *model.StepProfile, kv benchKV) (run BenchRun, err error) {
	sess, filled, err := kv.session(e, ids, tokens, steps)
	if err != nil {
		return run, err
	}
	var prof0 *os.File
	stop := func() {
		if prof0 != nil {
			pprof.StopCPUProfile()
			if cerr := prof0.Close(); err == nil {
				err = cerr
			}
			prof0 = nil
		}
	}
	defer stop()
	start := e.ExpertStats()
	if prof.prefill != "" {
		if prof0, err = startProfile(prof.prefill); err != nil {
			return run, err
		}
	}
	var atDecode expertcache.Stats
	var layersAtDecode []layerCount
	var handoffs, parks uint64
	var ngramAtDecode NgramStats
	ngramStart := e.NgramStats()
	first := true
	opt := GenerateOptions{
		MaxTokens: tokens, Sampling: sample.Params{}, IgnoreEOS: true, PrefillChunk: chunk,
		OnStep: func() error { // not OnLogits: a GPU session would copy every row for it
			if !first {
				return nil
			}
			first = false
			atDecode, handoffs, parks = e.ExpertStats(), e.pool.Handoffs(), e.pool.Parks()
			if e.counted != nil {
				layersAtDecode = e.counted.snapshot()
			}
			ngramAtDecode = e.NgramStats()
			stop()
			if err != nil {
				return err
			}
			if prof.decode != "" {
				prof0, err = startProfile(prof.decode)
			}
			return err
		},
	}
	res, gerr := sess.Generate(ctx, ids, opt)
	stop()
	if gerr != nil {
		return run, gerr
	}
	if err != nil {
		return run, err
	}
	run = BenchRun{Prompt: name, PromptTokens: len(ids), Generated: len(res.IDs), PrefillTokS: res.PrefillTokS,
		DecodeTokS: res.DecodeTokS, PeakRSS: res.PeakRSS, PrefillChunk: res.PrefillChunk}
	if steps := len(res.IDs) - 1; steps > 0 {
		bits := model.KVFloat32 // a device's cache: the reference width
		if w, ok := sess.st.(model.KVWidth); ok {
			bits = w.KVBits()
		}
		run.StateBytesPerToken = e.meanStateBytes(filled+len(ids), steps, bits)
		run.HandoffsPerToken = float64(e.pool.Handoffs()-handoffs) / float64(steps)
		run.ParksPerToken = float64(e.pool.Parks()-parks) / float64(steps)
		ng := e.NgramStats()
		run.NgramBytesPerToken = float64(ng.Bytes-ngramAtDecode.Bytes) / float64(steps)
		run.NgramRowsPerToken = float64(ng.Rows-ngramAtDecode.Rows) / float64(steps)
		run.NgramWaitPerTok = (ng.Wait - ngramAtDecode.Wait).Seconds() / float64(steps)
	}
	if ngramAtDecode.Rows > 0 {
		run.PrefillNgramBytes = ngramAtDecode.Bytes - ngramStart.Bytes
		run.NgramRowBytes = e.ngramRowBytes()
	}
	if e.cache != nil || e.streamsExperts() {
		pre := expertReport(start, atDecode, len(ids))
		run.PrefillHitRate, run.PrefillBytesRead, run.PrefillIOWait = pre.HitRate, pre.BytesRead, pre.WaitSeconds
		run.PrefillBytesPerToken = pre.BytesPerToken
		run.PrefillWarmBytes = pre.WarmBytes
		run.PrefillWarmUsed = min(pre.WarmHits*e.Install.Manifest.Experts.Stride, pre.WarmBytes)
		if compute := res.PrefillSecs - pre.WaitSeconds; compute > 0 {
			run.PrefillComputeTokS = float64(len(ids)) / compute
		}
		steps := max(len(res.IDs)-1, 0) // the last sampled token is never fed back
		x := expertReport(atDecode, e.ExpertStats(), steps)
		run.HitRate, run.Misses, run.BytesPerToken, run.ReadRate = x.HitRate, x.Misses, x.BytesPerToken, x.ReadRate
		if steps > 0 {
			run.IOWaitPerTok = x.WaitSeconds / float64(steps)
			run.GuessesPerToken = float64(x.Prefetched) / float64(steps)
		}
		if x.Prefetched > 0 {
			run.GuessesUsed = float64(x.PrefetchHits) / float64(x.Prefetched)
		}
		if e.counted != nil && layersAtDecode != nil {
			run.layerFigures(layersAtDecode, e.counted.snapshot(), steps)
		}
		if e.cache == nil { // the GPU's copies run inside the step: bytes over the decode's time
			run.ReadRate = run.BytesPerToken * run.DecodeTokS
		}
	}
	return run, nil
}

// streamsExperts reports whether the engine streams experts itself (the
// GPU engine's VRAM slots): the bench reports its hits and bytes as the
// expert cache's.
func (e *Engine) streamsExperts() bool {
	s, ok := e.model.(interface{ StreamsExperts() bool })
	return ok && s.StreamsExperts()
}

// layerFigures sets the per-layer decode figures from the layer counts at
// the decode's start and end, over steps steps. A layer no step asked
// anything of (not MoE) is left out.
func (run *BenchRun) layerFigures(start, end []layerCount, steps int) {
	var layers int
	var misses, waits int64
	for l := range end {
		hits, miss := end[l].Hits-start[l].Hits, end[l].Misses-start[l].Misses
		if hits+miss == 0 {
			continue
		}
		rate := float64(hits) / float64(hits+miss)
		if layers == 0 || rate < run.LayerHitRateMin {
			run.LayerHitRateMin = rate
		}
		if layers == 0 || rate > run.LayerHitRateMax {
			run.LayerHitRateMax = rate
		}
		layers++
		misses += miss
		waits += end[l].Waits - start[l].Waits
	}
	if steps > 0 && layers > 0 {
		run.NewExpertsPerLayerToken = float64(misses) / float64(layers*steps)
		run.WaitsPerToken = float64(waits) / float64(steps)
	}
}

// shiftedRoutes asks src for a run's positions: the sequence position less
// the synthetic rows before the prompt, so a run replays from its source's
// start whatever context it fills.
type shiftedRoutes struct {
	src   routing.Source
	first int
}

func (s shiftedRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	return s.src.Experts(pos-s.first, layer, dst)
}

// canOverrideRouting says why the bench cannot replay routing here, if it
// cannot: a model with no routed experts, or an engine that routes
// elsewhere (one that holds its experts replays only if it says so: the
// GPU engine's ReplaysRouting).
func (e *Engine) canOverrideRouting() error {
	if e.Install.Manifest.Experts == nil {
		return fmt.Errorf("%s: routing replay (--routing-trace, --routing) needs a Mixture-of-Experts model; this one has no routed experts", e.Install.Dir)
	}
	if e.cache == nil && !e.replaysRouting() {
		return e.routingRefusal()
	}
	return nil
}

// replaysRouting reports whether an engine that holds its experts takes a
// routing override on its states (model.RouteOverrider) all the same.
func (e *Engine) replaysRouting() bool {
	r, ok := e.model.(interface{ ReplaysRouting() bool })
	return ok && r.ReplaysRouting()
}

func (e *Engine) routingRefusal() error {
	return fmt.Errorf("--routing-trace and --routing need an engine that replays routing: the CPU engine, or the GPU engine (the %s engine routes on its own)", e.info.Name)
}

// RoutingGeometry is the routing shape of the loaded model, for
// routing.Parse and the synthetic sources: its decoder layers (every one
// has a MoE block in the architectures that stream experts), experts per
// layer and top-k.
func (e *Engine) RoutingGeometry() (routing.Geometry, error) {
	m := e.Install.Manifest
	if m.Experts == nil {
		return routing.Geometry{}, fmt.Errorf("%s: routing replay needs a Mixture-of-Experts model; this one has no routed experts", e.Install.Dir)
	}
	return routing.Geometry{Layers: m.Geometry.NumLayers, Experts: m.Experts.Count, TopK: m.Experts.TopK}, nil
}

// meanStateBytes is the state a decode step reads, averaged over steps
// steps after a prompt of promptTokens: step s attends over promptTokens+s
// positions (the prompt, the tokens fed back, and its own).
func (e *Engine) meanStateBytes(promptTokens, steps, kvBits int) float64 {
	sz, ok := e.model.(model.StateSizer)
	if !ok {
		return 0
	}
	var sum float64
	for s := 1; s <= steps; s++ {
		sum += float64(sz.StateBytes(promptTokens+s, kvBits))
	}
	return sum / float64(steps)
}

func startProfile(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return f, nil
}

// medianRun is the per-field median of runs (each field on its own).
func medianRun(runs []BenchRun) BenchRun {
	med := func(get func(BenchRun) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return median(v)
	}
	return BenchRun{
		Prompt:          "median",
		PromptTokens:    int(med(func(r BenchRun) float64 { return float64(r.PromptTokens) })),
		Generated:       int(med(func(r BenchRun) float64 { return float64(r.Generated) })),
		PrefillTokS:     med(func(r BenchRun) float64 { return r.PrefillTokS }),
		DecodeTokS:      med(func(r BenchRun) float64 { return r.DecodeTokS }),
		HitRate:         med(func(r BenchRun) float64 { return r.HitRate }),
		Misses:          int64(med(func(r BenchRun) float64 { return float64(r.Misses) })),
		BytesPerToken:   med(func(r BenchRun) float64 { return r.BytesPerToken }),
		ReadRate:        med(func(r BenchRun) float64 { return r.ReadRate }),
		IOWaitPerTok:    med(func(r BenchRun) float64 { return r.IOWaitPerTok }),
		GuessesPerToken: med(func(r BenchRun) float64 { return r.GuessesPerToken }),
		GuessesUsed:     med(func(r BenchRun) float64 { return r.GuessesUsed }),
		PeakRSS:         int64(med(func(r BenchRun) float64 { return float64(r.PeakRSS) })),

		StateBytesPerToken: med(func(r BenchRun) float64 { return r.StateBytesPerToken }),

		HandoffsPerToken: med(func(r BenchRun) float64 { return r.HandoffsPerToken }),
		ParksPerToken:    med(func(r BenchRun) float64 { return r.ParksPerToken }),
		PrefillHitRate:   med(func(r BenchRun) float64 { return r.PrefillHitRate }),
		PrefillBytesRead: int64(med(func(r BenchRun) float64 { return float64(r.PrefillBytesRead) })),
		PrefillIOWait:    med(func(r BenchRun) float64 { return r.PrefillIOWait }),

		NgramBytesPerToken: med(func(r BenchRun) float64 { return r.NgramBytesPerToken }),
		NgramRowsPerToken:  med(func(r BenchRun) float64 { return r.NgramRowsPerToken }),
		NgramRowBytes:      int64(med(func(r BenchRun) float64 { return float64(r.NgramRowBytes) })),
		NgramWaitPerTok:    med(func(r BenchRun) float64 { return r.NgramWaitPerTok }),
		PrefillNgramBytes:  int64(med(func(r BenchRun) float64 { return float64(r.PrefillNgramBytes) })),

		PrefillChunk:         int(med(func(r BenchRun) float64 { return float64(r.PrefillChunk) })),
		PrefillBytesPerToken: med(func(r BenchRun) float64 { return r.PrefillBytesPerToken }),
		PrefillComputeTokS:   med(func(r BenchRun) float64 { return r.PrefillComputeTokS }),
		PrefillWarmBytes:     int64(med(func(r BenchRun) float64 { return float64(r.PrefillWarmBytes) })),
		PrefillWarmUsed:      int64(med(func(r BenchRun) float64 { return float64(r.PrefillWarmUsed) })),

		LayerHitRateMin:         med(func(r BenchRun) float64 { return r.LayerHitRateMin }),
		LayerHitRateMax:         med(func(r BenchRun) float64 { return r.LayerHitRateMax }),
		NewExpertsPerLayerToken: med(func(r BenchRun) float64 { return r.NewExpertsPerLayerToken }),
		WaitsPerToken:           med(func(r BenchRun) float64 { return r.WaitsPerToken }),
	}
}

// prefillLimits is the prefill rate the raw disk read rate allows at the
// median bytes per token, and which limit binds: the lower of it and the
// median compute-bound rate ("" when either is unknown).
func prefillLimits(diskRate float64, m BenchRun) (diskTokS float64, binding string) {
	switch {
	case m.PrefillBytesPerToken <= 0 && m.PrefillComputeTokS > 0:
		return 0, "compute" // nothing read: the disk sets no limit
	case diskRate <= 0 || m.PrefillBytesPerToken <= 0:
		return 0, ""
	}
	diskTokS = diskRate / m.PrefillBytesPerToken
	switch {
	case m.PrefillComputeTokS <= 0:
		return diskTokS, ""
	case diskTokS < m.PrefillComputeTokS:
		return diskTokS, "disk"
	}
	return diskTokS, "compute"
}

// median of v (the mean of the middle two for an even count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// DecodeWeightBytes is the weight bytes one decode step reads: every
// resident matrix (packed codes, scales and biases) except the embedding,
// of which one row is read, and, per MoE layer, top-k experts' parts.
// Norms and other vectors are widened once at load and not counted.
func DecodeWeightBytes(m *packexperts.Manifest) int64 {
	var total int64
	for _, t := range m.Tensors {
		if len(t.Shape) != 2 {
			continue
		}
		n := tensorBytes(t)
		if t.Name == "model.embed_tokens.weight" && t.Shape[0] > 0 {
			n /= t.Shape[0]
		}
		total += n
	}
	if x := m.Experts; x != nil {
		var expert int64
		for _, p := range x.Parts {
			expert += tensorBytes(p)
		}
		total += int64(x.TopK) * int64(len(x.Layers)) * expert
	}
	return total
}

func tensorBytes(t packexperts.Tensor) int64 {
	n := t.Length
	if t.Scales != nil {
		n += t.Scales.Length
	}
	if t.Biases != nil {
		n += t.Biases.Length
	}
	return n
}

// MemReadRates sums one buffer of size bytes (default 512 MiB when size is
// 0) on 1 … threads goroutines, alternating the thread counts over
// memReadPasses rounds, and returns each thread count's median and best
// rate in bytes/s: the plain memory-read rate the kernels are compared
// with. Decode rates are medians of averages over many tokens, so the
// like-for-like comparison is with the median; the best shows what the
// machine reaches when nothing else loads it.
func MemReadRates(size int64, threads int) (med, best map[int]float64) {
	if size <= 0 {
		size = 512 << 20
	}
	// The same huge-page memory the weights live in (see internal/hugemem).
	region, err := hugemem.Alloc(int(size))
	if err != nil {
		return map[int]float64{}, map[int]float64{}
	}
	defer region.Free()
	buf := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(region.Bytes))), size/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	spans := [][]byte{region.Bytes}
	return readRates(memReadPasses, threads, func() [][]byte { return spans })
}

// memReadPasses is how many rounds MemReadRates alternates over: about a
// second of reading at this machine's rates.
const memReadPasses = 24

// DiskReadRate reads n random whole experts (stride bytes each, from random
// layers) on threads readers, the way mode (an expertcache read mode:
// "direct", "dontcache", "dropbehind" or "buffered") reads, and returns
// bytes/s: the raw rate the expert cache's misses could at best be read at.
func DiskReadRate(in *Install, n, threads int, mode string) (float64, error) {
	x := in.Manifest.Experts
	if x == nil || len(x.Layers) == 0 {
		return 0, nil
	}
	if x.Stride%limits.DirectIOAlign != 0 {
		return 0, fmt.Errorf("%s: expert stride %d is not a multiple of %d; run nvmai-verify --verify-install %s", in.Dir, x.Stride, limits.DirectIOAlign, in.Dir)
	}
	if n <= 0 {
		n = 256
	}
	threads = max(threads, 1)
	fds := make([]int, 0, len(x.Layers))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, l := range x.Layers {
		path := filepath.Join(in.Dir, filepath.FromSlash(l.File))
		fd, err := openForRate(path, mode)
		if err != nil {
			return 0, fmt.Errorf("raw read rate: %w", err)
		}
		fds = append(fds, fd)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	jobs := make(chan [2]int, n)
	for range n {
		jobs <- [2]int{rng.IntN(len(fds)), rng.IntN(x.Count)}
	}
	close(jobs)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	start := time.Now()
	for t := range threads {
		wg.Go(func() { errs[t] = readExperts(fds, x.Stride, mode, jobs) })
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("raw read rate in %s: %w", in.Dir, err)
		}
	}
	return float64(int64(n)*x.Stride) / secs, nil
}

func openForRate(path, mode string) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if mode == "direct" {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open (" + mode + ")", Path: path, Err: err}
	}
	if mode == "dontcache" || mode == "dropbehind" {
		unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM) // as the cache opens them: no readahead
	}
	return fd, nil
}

func readExperts(fds []int, stride int64, mode string, jobs <-chan [2]int) error {
	buf, err := unix.Mmap(-1, 0, int(stride), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	for j := range jobs {
		fd, off := fds[j[0]], int64(j[1])*stride
		for done := 0; done < len(buf); {
			var k int
			var err error
			if mode == "dontcache" {
				k, err = unix.Preadv2(fd, [][]byte{buf[done:]}, off+int64(done), unix.RWF_DONTCACHE)
			} else {
				k, err = unix.Pread(fd, buf[done:], off+int64(done))
			}
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				return err
			case k == 0:
				return fmt.Errorf("short read at offset %d", off+int64(done))
			}
			done += k
		}
		if mode == "dropbehind" {
			unix.Fadvise(fd, off, stride, unix.FADV_DONTNEED)
		}
	}
	return nil
}

// cpuName is the model name /proc/cpuinfo gives, with the core count.
func cpuName() string {
	raw, _ := os.ReadFile("/proc/cpuinfo")
	name := goruntime.GOARCH
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			name = strings.TrimSpace(v)
			break
		}
	}
	return fmt.Sprintf("%s, %d CPUs", name, goruntime.NumCPU())
}
