package qwen38gpu

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/internal/testfix/routefix"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// stateBytes, what the plan reserves for one sequence, grows with the
// context and the KV width and counts at least the KV cache and the fixed
// state (host-only).
func TestStateBytesGrowsWithContextAndWidth(t *testing.T) {
	cfg := tinyConfig(t)
	g := newGeometry(cfg)
	small, large := stateBytes(cfg, g, DefaultChunk, 256, 8), stateBytes(cfg, g, DefaultChunk, 1024, 8)
	if small >= large {
		t.Errorf("%d bytes at 256 tokens, %d at 1024", small, large)
	}
	if f32 := stateBytes(cfg, g, DefaultChunk, 1024, 32); f32 <= large {
		t.Errorf("float32 KV %d bytes, int8 %d", f32, large)
	}
	if min := cfg.KVBytes(1024, 8) + cfg.FixedStateBytes(); large < min {
		t.Errorf("%d bytes, below the KV and fixed state %d", large, min)
	}
}

// tinyConfig is the tiny-qwen38 synthetic geometry's model config.
func tinyConfig(t *testing.T) qwen38.Config {
	t.Helper()
	sg, err := convert.LookupSynthGeometry("tiny-qwen38", 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := qwen38.ConfigFromGeometry(sg.Geometry)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// loadSlots loads dir on the GPU engine with slots expert slots a layer
// (NVMAI_GPU_SLOTS; 0: the plan decides, resident on a test card).
func loadSlots(t *testing.T, dir string, slots int) (*runtime.Engine, *Backend) {
	t.Helper()
	v := ""
	if slots > 0 {
		v = strconv.Itoa(slots)
	}
	t.Setenv("NVMAI_GPU_SLOTS", v)
	e, err := runtime.Load(dir, runtime.Options{Threads: 2, Device: model.GPU})
	if err != nil {
		t.Fatal(err)
	}
	b := e.Model().(*Backend)
	p := b.Model.Plan()
	if (slots == 0) != p.Resident() || slots > 0 && p.Slots != slots {
		e.Close()
		t.Fatalf("plan %+v, want %d slots a layer (0: resident)", p, slots)
	}
	return e, b
}

// sampled runs a seeded sampled generation of n tokens.
func sampled(t *testing.T, e *runtime.Engine, ids []int, n int, p sample.Params) []int {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 8})
	defer s.Close()
	res, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: n, IgnoreEOS: true, Sampling: p})
	if err != nil {
		t.Fatal(err)
	}
	return res.IDs
}

// TestQwen38GPUStreamedIsBitwiseResident: tiny-qwen38 synthetic installs
// at 4 and 8 bits streamed at top-k = 4 and 7 of 16 slots a layer
// (NVMAI_GPU_SLOTS) give bitwise the resident engine's logits after
// prompts of 7, 40 and 300 tokens (the last in two prefill passes, which
// stage their experts), its 24 greedy tokens (decode steps resolving to
// slots inside the graph) at KV widths 32 and 8, a prompt fed token by
// token, and seeded sampled generations; the counters saw hits and misses.
func TestQwen38GPUStreamedIsBitwiseResident(t *testing.T) {
	cudatest.Need(t)
	for _, bits := range []int{4, 8} {
		t.Run(fmt.Sprintf("%d-bit", bits), func(t *testing.T) {
			dir := synthInstall(t, bits)
			ref := residentReference(t, dir)
			for _, slots := range []int{4, 7} {
				t.Run(fmt.Sprintf("%d slots", slots), func(t *testing.T) {
					e, b := loadSlots(t, dir, slots)
					defer e.Close()
					ref.check(t, e, b, "streamed")
					s, ok, err := b.Model.StreamStats()
					if err != nil || !ok {
						t.Fatalf("stream stats: ok %v, %v", ok, err)
					}
					t.Logf("STREAM qwen38 %d-bit %d slots: decode %d hits %d misses %d bytes; prefill %d from VRAM %d from RAM", bits, slots, s.DecodeHits, s.DecodeMisses, s.DecodeBytes, s.PrefillFromVRAM, s.PrefillFromHost)
					if s.DecodeHits == 0 || s.DecodeMisses == 0 || s.PrefillFromHost == 0 || s.DecodeBytes != s.DecodeMisses*b.Model.Plan().Stride {
						t.Errorf("counters %+v: want decode hits and misses, prefill copies, a record a miss", s)
					}
					if st := b.ExpertStats(); st.Mode != model.ExpertModeGPUPinned || st.Hits != s.DecodeHits+s.PrefillFromVRAM || st.SlotsPerLayer != slots {
						t.Errorf("expert stats %+v", st)
					}
					if !b.StreamsExperts() {
						t.Error("StreamsExperts is false for a streamed plan")
					}
				})
			}
		})
	}
}

// A RAM budget below top-k experts a layer (the RAM tier's minimum) is
// refused with the numbers and the flag to raise, not half-loaded.
func TestQwen38GPUStreamedRefusesRAMBelowTopK(t *testing.T) {
	cudatest.Need(t)
	t.Setenv("NVMAI_GPU_SLOTS", "4")
	_, err := runtime.Load(synthInstall(t, 4), runtime.Options{Threads: 2, Device: model.GPU, Experts: runtime.ExpertOptions{Budget: 1 << 10}})
	if err == nil || !strings.Contains(err.Error(), "RAM tier") || !strings.Contains(err.Error(), "--ram-budget") {
		t.Fatalf("a 1 KiB RAM budget: %v", err)
	}
}

// loadHostPlanned loads dir on the GPU engine with slots VRAM slots a
// layer (NVMAI_GPU_SLOTS) and a RAM tier of ramSlots experts a layer
// (--ram-budget), below every expert, so the host plans and the disk is
// read; ramSlots 0 with force sets NVMAI_GPU_HOST_PLANNED=1 instead (the
// tier then sized by the RAM available).
func loadHostPlanned(t *testing.T, dir string, slots, ramSlots int, force bool) (*runtime.Engine, *Backend) {
	t.Helper()
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NVMAI_GPU_SLOTS", strconv.Itoa(slots))
	v := ""
	if force {
		v = "1"
	}
	t.Setenv("NVMAI_GPU_HOST_PLANNED", v)
	budget := int64(ramSlots) * m.Experts.Stride * int64(len(m.Experts.Layers))
	e, err := runtime.Load(dir, runtime.Options{Threads: 2, Device: model.GPU, Experts: runtime.ExpertOptions{Budget: budget}})
	t.Setenv("NVMAI_GPU_HOST_PLANNED", "")
	if err != nil {
		t.Fatal(err)
	}
	b := e.Model().(*Backend)
	p := b.Model.Plan()
	if !p.HostPlanned || p.Slots != slots || ramSlots > 0 && p.RAMSlots != ramSlots || !strings.Contains(strings.Join(p.Lines(), "\n"), "host-planned") {
		e.Close()
		t.Fatalf("plan %+v, want host-planned with %d VRAM and %d RAM slots a layer", p, slots, ramSlots)
	}
	return e, b
}

// TestQwen38GPUHostPlannedIsBitwiseResident: tiny-qwen38 synthetic
// installs at 4 and 8 bits streamed host-planned (the disk tier: RAM below
// every expert) at 4 and 7 of 16 VRAM slots a layer with a RAM tier of
// top-k = 4 experts a layer (every prefill batch fills it: a sync between
// batches) and of 5, page-locked and pageable (NVMAI_GPU_RAM_PAGEABLE=1),
// and forced with NVMAI_GPU_HOST_PLANNED=1 over a tier the RAM available
// sizes, give bitwise the resident engine's logits after prompts of 7, 40
// and 300 tokens (the last in two prefill passes staged from the RAM
// tier), its 24 greedy tokens (decode steps without the graph, resolved
// on the host) at KV widths 32 and 8, a prompt fed token by token, and
// seeded sampled generations; the counters add up (VRAM misses are RAM
// tier requests, RAM misses a record read from disk each).
func TestQwen38GPUHostPlannedIsBitwiseResident(t *testing.T) {
	cudatest.Need(t)
	for _, bits := range []int{4, 8} {
		t.Run(fmt.Sprintf("%d-bit", bits), func(t *testing.T) {
			dir := synthInstall(t, bits)
			ref := residentReference(t, dir)
			for _, c := range []struct {
				slots, ram int
				pageable   string
				force      bool
			}{{4, 4, "", false}, {7, 5, "", false}, {7, 4, "1", false}, {7, 0, "", true}} {
				t.Run(fmt.Sprintf("%d slots, RAM %d, pageable %q, forced %v", c.slots, c.ram, c.pageable, c.force), func(t *testing.T) {
					t.Setenv("NVMAI_GPU_RAM_PAGEABLE", c.pageable)
					e, b := loadHostPlanned(t, dir, c.slots, c.ram, c.force)
					defer e.Close()
					p := b.Model.Plan()
					if c.pageable == "1" && p.RAMLocked {
						t.Errorf("NVMAI_GPU_RAM_PAGEABLE=1 but the plan says page-locked: %+v", p)
					}
					ref.check(t, e, b, "host-planned")
					s, ok, err := b.Model.StreamStats()
					if err != nil || !ok {
						t.Fatalf("stream stats: ok %v, %v", ok, err)
					}
					t.Logf("STREAM qwen38 %d-bit host-planned %d VRAM slots, RAM tier %d a layer (page-locked %v %s, %s reads), H2D %.1f GB/s: decode %d hits %d misses; prefill %d from VRAM %d from RAM; RAM tier %d hits %d misses, %d bytes from disk in %.3f s; host blocked %.3f s on the tier, %.3f s on syncs",
						bits, p.Slots, p.RAMSlots, p.RAMLocked, p.RAMNote, p.RAMMode, p.H2D/1e9, s.DecodeHits, s.DecodeMisses, s.PrefillFromVRAM, s.PrefillFromHost,
						s.RAMHits, s.RAMMisses, s.DiskBytes, s.DiskSeconds, s.AcquireSeconds, s.SyncSeconds)
					if !s.HostPlanned || s.DecodeMisses == 0 || s.DecodeHits == 0 || s.PrefillFromHost == 0 || s.RAMMisses == 0 || s.DiskBytes == 0 ||
						s.DecodeBytes != s.DecodeMisses*p.Stride || s.PrefillBytes != s.PrefillFromHost*p.Stride ||
						s.RAMHits+s.RAMMisses != s.DecodeMisses+s.PrefillFromHost || s.DiskBytes != s.RAMMisses*p.Stride {
						t.Errorf("counters %+v do not add up", s)
					}
					if x := b.ExpertStats(); x.Hits != s.DecodeHits+s.PrefillFromVRAM || x.Misses != s.DecodeMisses+s.PrefillFromHost || x.ReadSeconds != s.DiskSeconds || x.WaitSeconds <= 0 {
						t.Errorf("expert stats %+v from counters %+v", x, s)
					}
					if !b.StreamsExperts() {
						t.Error("StreamsExperts is false for a host-planned plan")
					}
				})
			}
		})
	}
}

// replayRows feeds ids to a fresh state of e under o and steps steps
// greedy tokens: the logits after the prompt and every token.
func replayRows(t *testing.T, e *runtime.Engine, ids []int, o model.RouteOverride, steps int) ([]float32, []int) {
	t.Helper()
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32, Routing: o})
	defer s.Close()
	return generateOn(t, s, ids, steps+1)
}

// TestQwen38GPURoutingReplayMatchesCPUEngine: under synthetic:agent and
// synthetic:diverse a tiny-qwen38 install at 4 and 8 bits gives on the GPU
// the CPU engine's greedy tokens under the same replay (bitwise logits
// required where the router's own are bitwise the CPU engine's; the
// distance logged), resident and streamed at 4 and 7 slots a layer, the
// streamed bitwise the resident under the replay; the replay is applied
// (the logits are not the router's).
func TestQwen38GPURoutingReplayMatchesCPUEngine(t *testing.T) {
	cudatest.Need(t)
	for _, bits := range []int{4, 8} {
		t.Run(fmt.Sprintf("%d-bit", bits), func(t *testing.T) {
			dir := fixinstall.Install(t, fixture(t, qwen38Layouts[0]), bits)
			cpu := loadEngine(t, dir, false)
			ids := synthPrompt(300, cpu.Install.Manifest.Geometry.Qwen4Exp.PLEResetTokenID)
			cpuRouter, _ := replayRows(t, cpu, ids, nil, 0)
			res, _ := loadSlots(t, dir, 0)
			gpuRouter, _ := replayRows(t, res, ids, nil, 0)
			res.Close()
			routerBitwise := slices.Equal(gpuRouter, cpuRouter)
			for _, spec := range []string{"synthetic:agent", "synthetic:diverse"} {
				src := routefix.Synthetic(t, cpu, spec)
				wantRow, want := replayRows(t, cpu, ids, src, 32)
				if slices.Equal(wantRow, cpuRouter) {
					t.Fatalf("%s: the CPU engine's logits are the router's: the replay is not applied", spec)
				}
				var residentRow []float32
				for _, slots := range []int{0, 4, 7} {
					e, _ := loadSlots(t, dir, slots)
					row, got := replayRows(t, e, ids, src, 32)
					e.Close()
					name := fmt.Sprintf("%d-bit %s at %d slots", bits, spec, slots)
					t.Logf("FIDELITY qwen38 replay %s: logits bitwise the CPU engine's %v (rel. error %.2e; the router's own bitwise %v), greedy equal %v",
						name, slices.Equal(row, wantRow), cudatest.RelErr(row, wantRow), routerBitwise, slices.Equal(got, want))
					if !slices.Equal(got, want) {
						t.Errorf("%s: greedy %v, CPU engine %v", name, got, want)
					}
					if routerBitwise && !slices.Equal(row, wantRow) {
						t.Errorf("%s: logits differ from the CPU engine's under the same replay (max %g)", name, cudatest.MaxAbsDiff(row, wantRow))
					}
					if slots == 0 {
						residentRow = row
					} else if !slices.Equal(row, residentRow) {
						t.Errorf("%s: streamed logits differ from resident under the replay (max %g)", name, cudatest.MaxAbsDiff(row, residentRow))
					}
				}
			}
		})
	}
}

// planExperts keeps the experts resident when the budget holds them (as
// the engine always ran), streams with the slots the rest of the budget
// holds, forces LoadOptions.Slots, plans on the host with a RAM tier when
// --ram-budget is below every expert, and refuses a budget past the free
// VRAM and a RAM budget below the tier's minimum, naming the flags
// (host-only: a model without a device).
func TestPlanExpertsQwen38(t *testing.T) {
	cfg := tinyConfig(t)
	const mib = 1 << 20
	g := newGeometry(cfg)
	L := int64(len(cfg.Layers))
	ex := &packexperts.Experts{Count: g.E, TopK: g.k, Stride: mib, Layers: make([]packexperts.ExpertLayer, L)}
	trunk := int64(64 * mib)
	state := stateBytes(cfg, g, DefaultChunk, 4096, 8)
	fixed := trunk + state
	for _, tc := range []struct {
		name      string
		opt       LoadOptions
		slots     int
		ramSlots  int // host-planned: the RAM tier's experts a layer
		err, err2 string
	}{
		{name: "every expert fits", opt: LoadOptions{VRAMBudget: fixed + int64(g.E)*L*mib}, slots: g.E},
		{name: "streamed", opt: LoadOptions{VRAMBudget: fixed + int64(g.E)*mib + 13*L*mib}, slots: 13},
		{name: "forced", opt: LoadOptions{VRAMBudget: 1 << 40 >> 4, Slots: 5}, slots: 5},
		{name: "past the free VRAM", opt: LoadOptions{VRAMBudget: 1 << 40}, err: "more than", err2: "free on test-card"},
		{name: "RAM below every expert: host-planned", opt: LoadOptions{VRAMBudget: 1 << 40 >> 4, Slots: 5, RAMBudget: 6 * L * mib}, slots: 5, ramSlots: 6},
		{name: "RAM below top-k a layer", opt: LoadOptions{VRAMBudget: 1 << 40 >> 4, Slots: 5, RAMBudget: mib}, err: "RAM tier", err2: "--ram-budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.MaxContext, tc.opt.KVBits = 4096, 8
			m := &Model{dev: &cuda.Device{Name: "test-card"}, cfg: cfg, g: g, chunk: DefaultChunk, opt: tc.opt, free0: 1 << 40 >> 3, total0: 1 << 40 >> 3, WeightBytes: trunk, layers: make([]layerW, L)}
			p, err := m.planExperts(ex)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.err2) {
					t.Fatalf("err %v, want %q and %q", err, tc.err, tc.err2)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Slots != tc.slots || p.Resident() != (tc.slots == g.E) || p.StateBytes != state || p.TrunkBytes != trunk || p.Layers != int(L) || p.TopK != g.k {
				t.Fatalf("plan %+v, want %d slots a layer", p, tc.slots)
			}
			if p.HostPlanned != (tc.ramSlots > 0) || p.RAMSlots != tc.ramSlots || tc.ramSlots > 0 && (p.PinnedBytes != 0 || p.RAMBytes != int64(tc.ramSlots)*L*mib) {
				t.Fatalf("plan %+v, want a RAM tier of %d experts a layer (0: device-planned)", p, tc.ramSlots)
			}
			if lines := p.Lines(); len(lines) == 0 || !strings.HasPrefix(lines[0], "gpu plan: ") {
				t.Fatalf("plan lines %q", lines)
			}
		})
	}
}

// residentRef is the resident engine's outputs the streamed and host-planned
// tests compare with: logits and 24 greedy tokens after prompts of 7, 40 and
// 300 tokens at KV widths 32 and 8, the last logits of a 60-token prompt fed
// whole, and two seeded sampled generations from it.
type residentRef struct {
	eos, vocab int
	want       map[string]refOut
	ids        []int
	whole      []float32
	params     []sample.Params
	sampled    [][]int
}

type refOut struct {
	row []float32
	ids []int
}

func residentReference(t *testing.T, dir string) residentRef {
	res, rb := loadSlots(t, dir, 0)
	defer res.Close()
	r := residentRef{eos: res.Install.Manifest.Geometry.Qwen4Exp.PLEResetTokenID, vocab: rb.Model.Config().VocabSize, want: map[string]refOut{},
		params: []sample.Params{{Temperature: 0.7, TopK: 20, TopP: 0.95, Seed: 7}, {Temperature: 1, Seed: 4}}}
	for _, kv := range []int{32, 8} {
		for _, n := range []int{7, 40, 300} {
			row, ids := generate(t, res, synthPrompt(n, r.eos), 24, kv)
			r.want[fmt.Sprint(kv, n)] = refOut{row, ids}
		}
	}
	r.ids = synthPrompt(60, r.eos)
	r.whole = cudatest.LastLogits(t, func() (cudatest.Sequence, error) { return rb.Model.NewState(StateOptions{KVInitial: 4}) }, r.ids, true, r.vocab)
	for _, p := range r.params {
		r.sampled = append(r.sampled, sampled(t, res, r.ids, 24, p))
	}
	return r
}

// check runs the same generations on e (backend b, streamed as what says)
// and reports every difference from the resident engine's, bit for bit;
// the 60-token prompt is fed token by token.
func (r residentRef) check(t *testing.T, e *runtime.Engine, b *Backend, what string) {
	t.Helper()
	for _, kv := range []int{32, 8} {
		for _, n := range []int{7, 40, 300} {
			row, got := generate(t, e, synthPrompt(n, r.eos), 24, kv)
			w := r.want[fmt.Sprint(kv, n)]
			if !slices.Equal(row, w.row) {
				t.Errorf("kv %d, %d tokens: logits differ from resident (max %g)", kv, n, cudatest.MaxAbsDiff(row, w.row))
			}
			if !slices.Equal(got, w.ids) {
				t.Errorf("kv %d, %d tokens: greedy %v, resident %v", kv, n, got, w.ids)
			}
		}
	}
	steps := cudatest.LastLogits(t, func() (cudatest.Sequence, error) { return b.Model.NewState(StateOptions{KVInitial: 4}) }, r.ids, false, r.vocab)
	if !slices.Equal(steps, r.whole) {
		t.Errorf("token by token %s vs whole resident: logits differ by %g", what, cudatest.MaxAbsDiff(steps, r.whole))
	}
	for i, p := range r.params {
		if got := sampled(t, e, r.ids, 24, p); !slices.Equal(got, r.sampled[i]) {
			t.Errorf("sampled %+v: %v, resident %v", p, got, r.sampled[i])
		}
	}
}
