package gpu

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/sample"
)

// The GPU engine runs both qwen35 architectures and holds every weight,
// the routed experts included, in device memory.
func init() {
	for _, arch := range []string{qwen35.ArchMoE, qwen35.ArchDense} {
		model.Register(arch, model.GPU, model.Entry{Load: Loader, Footprint: Footprint, HoldsExperts: true})
	}
}

// Footprint implements model.Footprinter: the sequence's KV cache (at
// req.KVBits, stored as the CPU engine stores it), recurrent state and
// scratch live in device memory, so none of it is host memory. The
// geometry, KV width and context are checked as the CPU engine checks them.
func Footprint(req model.FootprintRequest) (model.StateFootprint, error) {
	f, err := qwen35.Footprint(req)
	if err != nil {
		return f, err
	}
	return model.StateFootprint{KVBits: f.KVBits, MaxContext: f.MaxContext}, nil
}

// Backend is the GPU engine as a model.Model.
type Backend struct {
	Dev   *cuda.Device
	Model *Model
	last  *State
}

// Loader opens GPU 0 and uploads the install's weights. The geometry is
// checked first, so a model the engine cannot run is refused without a
// device.
func Loader(req model.Request) (model.Model, error) {
	cfg, err := qwen35.ConfigFor(req.Manifest.Architecture, req.Manifest.Geometry, req.RopeScaling, req.MaxContext)
	if err != nil {
		return nil, err
	}
	if cfg.RopeScaling.Type != "" {
		// The kernels take plain inverse frequencies and no attention factor.
		return nil, fmt.Errorf("the GPU engine does not implement %s RoPE scaling yet; run this model with --engine cpu", cfg.RopeScaling.Type)
	}
	dev, err := cuda.Open(0)
	if err != nil {
		return nil, fmt.Errorf("--engine gpu: %w", err)
	}
	m, err := LoadWith(dev, cfg, req.Weights, req.Dir, req.Manifest.Experts,
		LoadOptions{VRAMBudget: req.VRAMBudget, RAMBudget: req.RAMBudget, MaxContext: req.MaxContext, KVBits: req.KVBits, Log: os.Stderr})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("--engine gpu: %w", err)
	}
	return &Backend{Dev: dev, Model: m}, nil
}

// Info implements model.Model; Name labels reports.
func (b *Backend) Info() model.Info {
	c := b.Model.Config()
	return devshared.Info(b.Dev, c.Arch, c.VocabSize, c.MaxContext)
}

// NewState starts a sequence; a zero KVBits is model.DefaultKVBits, as on
// the CPU engine.
func (b *Backend) NewState(opt model.StateOptions) (model.State, error) {
	bits, err := devshared.SessionKVBits("gpu", opt.KVBits)
	if err != nil {
		return nil, err
	}
	st, err := b.Model.NewState(StateOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: bits})
	if err != nil {
		return nil, err
	}
	b.last = st
	return st, nil
}

// PassLength implements model.PassSizer: the prompt tokens per pass are
// the engine's chunk (NVMAI_GPU_CHUNK, default DefaultChunk).
func (b *Backend) PassLength(int) int { return b.Model.chunk }

// StateBytes implements model.StateSizer.
func (b *Backend) StateBytes(tokens, kvBits int) int64 {
	return b.Model.cfg.StateBytesAt(tokens, kvBits)
}

// Close frees the weights and the device.
func (b *Backend) Close() {
	b.Model.Close()
	b.Dev.Close()
}

// The device state is the surface's State, and samples on the device.
var (
	_ model.State   = (*State)(nil)
	_ model.Sampler = (*State)(nil)
)

// BenchInfo is the GPU section of nvmai-run bench's report.
type BenchInfo struct {
	Device          string  `json:"device"`
	Driver          int     `json:"driver"`
	NVRTC           string  `json:"nvrtc"`
	WeightBytes     int64   `json:"weight_bytes"`
	TokenBytes      int64   `json:"weight_bytes_per_token"`
	KernelsPerToken int     `json:"kernels_per_token"`
	GraphMsPerToken float64 `json:"graph_ms_per_token"` // decode step replayed as a graph, device time
	HostMsPerToken  float64 `json:"host_ms_per_token"`  // Forward + Argmax as a session calls them, wall time
	// Sampling on the device with the fixtures' generation config
	// (temperature 0.7, top-k 20, top-p 0.95): topk_cand alone and the
	// whole sampled pick, device time, and Forward + Sample as a sampled
	// session calls them, wall time.
	TopKMs                float64            `json:"topk_ms"`
	SampleMs              float64            `json:"sample_ms"`
	HostSampledMsPerToken float64            `json:"host_sampled_ms_per_token"`
	EagerMsPerToken       float64            `json:"eager_ms_per_token"`   // the same launches one by one
	EmptyGraphMs          float64            `json:"empty_graph_ms"`       // a graph of as many empty kernels
	CopyBandwidth         float64            `json:"copy_bytes_per_s"`     // device-to-device, bytes read + written
	WeightBandwidth       float64            `json:"weight_bytes_per_s"`   // weight bytes per token ÷ graph time
	BandwidthShare        float64            `json:"weight_share_of_copy"` // WeightBandwidth ÷ CopyBandwidth
	PhaseMs               map[string]float64 `json:"phase_ms_per_token"`   // one eager step split by events
	KernelMs              map[string]float64 `json:"kernel_ms_per_token"`  // the same step by phase/kernel
	PhaseBytes            map[string]int64   `json:"phase_weight_bytes"`   // weights each phase reads
	PhaseBandwidth        map[string]float64 `json:"phase_weight_bytes_per_s"`
	// A prefill chunk of PrefillTokens after as many tokens of prompt, its
	// kernels one by one with events between them.
	PrefillTokens   int                `json:"prefill_profile_tokens,omitempty"`
	PrefillMs       float64            `json:"prefill_profile_ms,omitempty"`
	PrefillKernelMs map[string]float64 `json:"prefill_kernel_ms,omitempty"`
	// DecodeProfile is a decode step kernel by kernel, each kernel's
	// bytes and rate (decodeprofile.go); nil when
	// NVMAI_GPU_DECODE_PROFILE=0.
	DecodeProfile *DecodeProfile `json:"decode_profile,omitempty"`
	// Plan is where the routed experts live (resident, or streamed into
	// VRAM slots from pinned RAM) and what it predicts; nil for a dense
	// model.
	Plan     *Plan  `json:"plan,omitempty"`
	PDL      bool   `json:"pdl"`   // programmatic dependent launch
	Fused    bool   `json:"fused"` // decode's fused launches
	Grouped  bool   `json:"grouped_prefill"`
	GDNSplit bool   `json:"gdn_split"`   // delta rule 32 columns a block
	MMA      bool   `json:"mma_prefill"` // prefill products on the tensor cores
	Error    string `json:"error,omitempty"`

	// Tiers is a host-planned plan's tiers over the session-style decode
	// steps (HostMsPerToken's): hit rates, PCIe and disk bytes and host
	// waits per token. Host-planned decode runs without a graph, so the
	// graph figures stay 0.
	Tiers *TierStats `json:"tiers,omitempty"`
	// CopyWait is, when the experts stream, the time a decode step waits
	// for its copies (copywait.go); ReplayHits, under a replayed routing
	// (nvmai-run bench sets it), the VRAM hit rate beside a simulated
	// per-layer LRU's on the same positions.
	CopyWait   *CopyWait           `json:"copy_wait,omitempty"`
	ReplayHits *routing.ReplayHits `json:"replay_hits,omitempty"`
}

// BenchInfo measures the device figures of a decode step on a fresh
// sequence (a 16-token prompt of id 1, then decode steps), and when the
// experts stream, the copy wait under the router's routing (which leaves
// the slot cache empty: the bench's runs start cold).
func (b *Backend) BenchInfo() any {
	info, err := b.Measure(16, 32)
	if err != nil {
		info.Error = err.Error()
		return info
	}
	if b.CopyWaitMeasurable() {
		cw, err := b.MeasureCopyWait(nil, "router", 16, 32)
		if err != nil {
			info.Error = "copy wait: " + err.Error()
			return info
		}
		info.CopyWait = &cw
	}
	return info
}

// Measure times decode steps after a prompt of prompt tokens: graph replays,
// eager launches, an empty graph of as many kernels, a phase split, and the
// copy bandwidth.
func (b *Backend) Measure(prompt, steps int) (*BenchInfo, error) {
	m := b.Model
	info := &BenchInfo{Device: b.Dev.Name, Driver: b.Dev.Driver, NVRTC: fmt.Sprintf("%d.%d", b.Dev.NVRTCVer[0], b.Dev.NVRTCVer[1]),
		WeightBytes: m.WeightBytes, TokenBytes: m.TokenBytes, PDL: b.Dev.PDL, Fused: m.fuse, Grouped: m.group, GDNSplit: m.splitGDN, MMA: m.mma}
	if m.cfg.Arch == qwen35.ArchMoE {
		p := m.plan
		info.Plan = &p
	}
	st, err := m.NewState(StateOptions{KVInitial: prompt + 4*steps + 8, KVBits: m.kvBits()})
	if err != nil {
		return info, err
	}
	defer st.Close()
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = 1 + i%7
	}
	if err := st.Forward(ids); err != nil {
		return info, err
	}
	if err := st.Forward([]int{1}); err != nil { // captures the graph
		return info, err
	}
	info.KernelsPerToken = st.graphKernels
	hostPlanned := m.hostPlanned() // no decode graph (streamhost.go)
	err = b.Dev.Do(func(c *cuda.Ctx) error {
		var err error
		if !hostPlanned {
			if info.GraphMsPerToken, err = timeIt(c, steps, func() error { return c.LaunchGraph(st.graph) }); err != nil {
				return err
			}
		}
		l := &gpukernels.Launcher{C: c, K: m.ks, GDNPipe: m.gdnPipe, GDNPar: m.gdnPar, GDNReg: m.gdnReg}
		if info.EagerMsPerToken, err = timeIt(c, steps, func() error { return m.forward(l, st, 1, nil) }); err != nil {
			return err
		}
		if !hostPlanned {
			if info.EmptyGraphMs, err = emptyGraph(c, l, st.dpos, info.KernelsPerToken, steps); err != nil {
				return err
			}
		}
		if info.PhaseMs, info.PhaseBytes, info.KernelMs, err = m.phases(c, st, 1); err != nil {
			return err
		}
		if info.TopKMs, err = timeIt(c, steps, func() error {
			return l.TopKCand(st.cand, st.s.logits, m.geom.V, min(20, m.geom.V-1), MaxCandidates)
		}); err != nil {
			return err
		}
		b, err := st.samp.Buffers(c, m.geom.V, &st.allocs)
		if err != nil {
			return err
		}
		if info.SampleMs, err = timeIt(c, steps, func() error {
			return b.SampleRow(l, st.cand, benchStep, st.s.logits, st.next)
		}); err != nil {
			return err
		}
		info.CopyBandwidth, err = copyBandwidth(c, 1<<30)
		return err
	})
	st.pos += 2*steps + 1 // every replay advanced the device position
	if hostPlanned {
		st.pos -= steps // no graph replays
	}
	if err != nil {
		return info, err
	}
	before, _, err := m.StreamStats()
	if err != nil {
		return info, err
	}
	start := time.Now()
	for range steps { // what a session pays: upload the id, replay, read the pick
		if err := st.Forward([]int{1}); err != nil {
			return info, err
		}
		if _, err := st.Argmax(); err != nil {
			return info, err
		}
	}
	info.HostMsPerToken = float64(time.Since(start).Microseconds()) / 1e3 / float64(steps)
	if hostPlanned {
		after, _, err := m.StreamStats()
		if err != nil {
			return info, err
		}
		info.Tiers = tierStats(before, after, steps)
	}
	start = time.Now()
	for range steps { // a sampled session: replay, then the pick on the device
		if err := st.Forward([]int{1}); err != nil {
			return info, err
		}
		if _, _, err := st.Sample(benchStep, nil); err != nil {
			return info, err
		}
	}
	info.HostSampledMsPerToken = float64(time.Since(start).Microseconds()) / 1e3 / float64(steps)
	info.PrefillTokens = min(prompt, m.chunk)
	if info.PrefillMs, info.PrefillKernelMs, err = m.prefillProfile(info.PrefillTokens); err != nil {
		return info, err
	}
	info.DecodeProfile = m.measureDecodeProfile(prompt, info)
	if info.GraphMsPerToken > 0 {
		info.WeightBandwidth = float64(m.TokenBytes) / (info.GraphMsPerToken / 1e3)
	}
	if info.CopyBandwidth > 0 {
		info.BandwidthShare = info.WeightBandwidth / info.CopyBandwidth
	}
	info.PhaseBandwidth = map[string]float64{}
	for k, v := range info.PhaseBytes {
		if ms := info.PhaseMs[k]; ms > 0 {
			info.PhaseBandwidth[k] = float64(v) / (ms / 1e3)
		}
	}
	return info, nil
}

// timeIt runs fn n times between two events and returns ms per run.
func timeIt(c *cuda.Ctx, n int, fn func() error) (float64, error) {
	if err := fn(); err != nil { // warm
		return 0, err
	}
	start, err := c.Record()
	if err != nil {
		return 0, err
	}
	for range n - 1 {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	end, err := c.Record()
	if err != nil {
		return 0, err
	}
	ms, err := c.Elapsed(start, end)
	c.Destroy(start)
	c.Destroy(end)
	return ms / float64(max(n-1, 1)), err
}

// emptyGraph times a graph of k trivial kernels: the launch floor of a
// decode step with that many kernels. It leaves *pos unchanged.
func emptyGraph(c *cuda.Ctx, l *gpukernels.Launcher, pos cuda.DevicePtr, k, n int) (float64, error) {
	if err := c.BeginCapture(); err != nil {
		return 0, err
	}
	var ferr error
	for range k {
		if err := l.Advance(pos, 0); err != nil && ferr == nil {
			ferr = err
		}
	}
	g, err := c.EndCapture()
	if ferr != nil {
		return 0, ferr
	}
	if err != nil {
		return 0, err
	}
	defer c.DestroyGraph(g)
	return timeIt(c, n, func() error { return c.LaunchGraph(g) })
}

// copyBandwidth times device-to-device copies of n bytes: bytes read plus
// written per second.
func copyBandwidth(c *cuda.Ctx, n uint64) (float64, error) {
	a, err := c.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer c.Free(a)
	b, err := c.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer c.Free(b)
	c.Memset32(a, 0x3f800001, n/4)
	ms, err := timeIt(c, 10, func() error { return c.DtoD(b, a, n) })
	if err != nil {
		return 0, err
	}
	return 2 * float64(n) / (ms / 1e3), nil
}

// prefillProfile times one prefill chunk of T tokens, kernel by kernel,
// on a fresh sequence that already holds T tokens.
func (m *Model) prefillProfile(T int) (float64, map[string]float64, error) {
	st, err := m.NewState(StateOptions{KVInitial: 2 * T, KVBits: m.kvBits()})
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	ids := make([]int, T)
	tok := make([]int32, T)
	for i := range ids {
		ids[i] = 1 + (i*7919)%(m.geom.V-1)
		tok[i] = int32(1 + ((i+T)*7919)%(m.geom.V-1))
	}
	if err := st.Forward(ids); err != nil {
		return 0, nil, err
	}
	var phase, kernels map[string]float64
	err = m.dev.Do(func(c *cuda.Ctx) error {
		if err := c.HtoD(st.tokens, cuda.Bytes(tok)); err != nil {
			return err
		}
		var err error
		phase, _, kernels, err = m.phases(c, st, T)
		return err
	})
	st.pos += T
	var total float64
	for _, v := range phase {
		total += v
	}
	return total, kernels, err
}

// phases runs one eager step of T tokens (the ids already on the device)
// with an event after every kernel and returns each phase's device time,
// the weight bytes it reads, and the time of each phase's kernels by name
// ("moe/qgemv").
func (m *Model) phases(c *cuda.Ctx, st *State, T int) (map[string]float64, map[string]int64, map[string]float64, error) {
	type mark struct {
		e      *cuda.Event
		kernel string
	}
	var marks []mark
	var rerr error
	record := func(kernel string) {
		e, err := c.Record()
		if err != nil && rerr == nil {
			rerr = err
		}
		marks = append(marks, mark{e, kernel})
	}
	defer func() {
		for _, mk := range marks {
			if mk.e != nil {
				c.Destroy(mk.e)
			}
		}
	}()
	record("")
	var bounds []int // index in marks where each phase ends, and its name
	var names []string
	l := &gpukernels.Launcher{C: c, K: m.ks, After: record, MMA: m.mma, GDNPipe: m.gdnPipe, GDNPar: m.gdnPar, GDNReg: m.gdnReg}
	if err := m.forward(l, st, T, func(ph string) { bounds, names = append(bounds, len(marks)-1), append(names, ph) }); err != nil {
		return nil, nil, nil, err
	}
	if rerr != nil {
		return nil, nil, nil, rerr
	}
	phase := map[string]float64{}
	kernels := map[string]float64{}
	b := 0
	for i := 1; i < len(marks); i++ {
		for b < len(bounds) && bounds[b] < i {
			b++
		}
		d, err := c.Elapsed(marks[i-1].e, marks[i].e)
		if err != nil {
			return nil, nil, nil, err
		}
		name := "?"
		if b < len(names) {
			name = names[b]
		}
		phase[name] += d
		kernels[name+"/"+marks[i].kernel] += d
	}
	return phase, m.phaseBytes, kernels, nil
}

// Summary is BenchInfo as lines of nvmai-run bench's text report.
func (info *BenchInfo) Summary() []string {
	if info.Error != "" {
		return []string{"gpu: measuring failed: " + info.Error}
	}
	lines := []string{
		fmt.Sprintf("gpu %s (driver %d, NVRTC %s): decode step %.3f ms on the device as a graph of %d kernels (%.3f ms launched one by one; a graph of as many empty kernels %.3f ms), %.3f ms as a session sees it",
			info.Device, info.Driver, info.NVRTC, info.GraphMsPerToken, info.KernelsPerToken, info.EagerMsPerToken, info.EmptyGraphMs, info.HostMsPerToken),
		fmt.Sprintf("gpu weights: %.0f MiB read per token → %.0f GB/s, %.0f%% of the %.0f GB/s device-to-device copy measured now",
			float64(info.TokenBytes)/(1<<20), info.WeightBandwidth/1e9, 100*info.BandwidthShare, info.CopyBandwidth/1e9),
	}
	if info.HostSampledMsPerToken > 0 {
		lines = append(lines, fmt.Sprintf("gpu sampling (T 0.7, top-k 20, top-p 0.95, on the device, the token id comes back): a sampled step %.3f ms as a session sees it; the pick %.3f ms on the device, of which topk_cand %.3f ms",
			info.HostSampledMsPerToken, info.SampleMs, info.TopKMs))
	}
	for _, ph := range []string{PhaseEmbed, PhaseGDN, PhaseAttention, PhaseMoE, PhaseMLP, PhaseHead} {
		if ms, ok := info.PhaseMs[ph]; ok {
			lines = append(lines, fmt.Sprintf("gpu phase %-9s %.3f ms/token (kernels one by one), weights %.0f MiB, %.0f GB/s",
				ph, ms, float64(info.PhaseBytes[ph])/(1<<20), info.PhaseBandwidth[ph]/1e9))
		}
	}
	if p := info.DecodeProfile; p != nil {
		lines = append(lines, p.Lines(12)...)
	}
	if info.PrefillTokens > 0 {
		lines = append(lines, fmt.Sprintf("gpu prefill chunk of %d tokens: %.2f ms on the device, kernels one by one (%.0f tok/s)",
			info.PrefillTokens, info.PrefillMs, float64(info.PrefillTokens)/(info.PrefillMs/1e3)))
	}
	if info.Plan != nil {
		lines = append(lines, info.Plan.Lines()...)
	}
	if t := info.Tiers; t != nil {
		lines = append(lines, fmt.Sprintf("gpu tiers over %d decode steps (host-planned, no graph): VRAM hit rate %.1f%%, RAM tier hit rate %.1f%% of the VRAM misses; %.1f MiB over PCIe and %.1f MiB from disk a token; the host blocked %.3f ms a token on disk reads and %.3f ms on stream syncs",
			t.Tokens, 100*t.VRAMHitRate, 100*t.RAMHitRate, t.PCIeBytesPerToken/(1<<20), t.DiskBytesPerToken/(1<<20), t.DiskWaitMsPerToken, t.SyncMsPerToken))
	}
	if cw := info.CopyWait; cw != nil {
		lines = append(lines, fmt.Sprintf("gpu copy wait (%s routing, %d decode steps after %d prompt tokens): %.3f ms a step waits for its copies: %.3f ms as it runs, %.3f ms with the copies skipped",
			cw.Routing, cw.Steps, cw.Prompt, cw.WaitMs, cw.StreamedMs, cw.NoCopyMs))
	}
	if h := info.ReplayHits; h != nil {
		lines = append(lines, fmt.Sprintf("gpu replay hits: VRAM hit rate %.1f%% measured, %.1f%% for a simulated per-layer LRU of %d slots on the same %d decode steps (%+.1f points)",
			100*h.VRAM, 100*h.SimulatedLRU, h.Slots, h.Steps, 100*(h.VRAM-h.SimulatedLRU)))
	}
	lines = append(lines, fmt.Sprintf("gpu launches: programmatic dependent launch %v, fused decode launches %v, prefill experts grouped %v, delta rule split by columns %v, prefill on the tensor cores %v",
		info.PDL, info.Fused, info.Grouped, info.GDNSplit, info.MMA))
	return lines
}

// benchStep is the sampled step the bench times: the fixtures' generation
// config.
var benchStep = sample.Step{Params: sample.Params{Temperature: 0.7, TopK: 20, TopP: 0.95}, U: 0.5, LogMinP: math.Inf(-1)}
