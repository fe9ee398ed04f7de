package gpu

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// planRAMTier keeps device-planned streaming while page-locked RAM holds
// every expert, and otherwise plans on the host with a RAM tier of
// --ram-budget (or half the RAM available when the flag is unset or asks
// for more than there is), refusing a tier below the expert cache's own
// minimum of top-k experts a layer with that minimum.
func TestPlanRAMTier(t *testing.T) {
	const mib = 1 << 20
	ex := &packexperts.Experts{Count: 64, TopK: 4, Stride: mib, Layers: make([]packexperts.ExpertLayer, 10)}
	all := int64(64 * 10 * mib)
	for _, tc := range []struct {
		name          string
		budget, avail int64
		force         bool
		host          bool
		slots         int
		why, err      string
	}{
		{name: "no budget, RAM enough", avail: 2 * all},
		{name: "no budget, RAM unknown", avail: 0},
		{name: "budget holds every expert", budget: all, avail: 2 * all},
		{name: "budget one expert short", budget: all - mib, avail: 2 * all, host: true, slots: 63, why: "--ram-budget"},
		{name: "budget of 8 a layer", budget: 80 * mib, avail: 2 * all, host: true, slots: 8, why: "--ram-budget"},
		{name: "budget, RAM unknown", budget: 80 * mib, host: true, slots: 8, why: "--ram-budget"},
		{name: "RAM short, no budget", avail: all / 2, host: true, slots: 16, why: "half the"},
		{name: "budget past RAM", budget: all - mib, avail: 200 * mib, host: true, slots: 10, why: "more than the"},
		{name: "exactly top-k", budget: 40 * mib, avail: 2 * all, host: true, slots: 4},
		{name: "below top-k", budget: 40*mib - 1, avail: 2 * all, err: "fewer than the 4 experts one token routes to"},
		{name: "RAM too small for top-k", avail: 60 * mib, err: fmt.Sprintf("(%d bytes)", expertcache.MinBudget(mib, 10, 4))},
		{name: "forced, RAM enough", avail: 2 * all, force: true, host: true, slots: 64, why: "half the"},
		{name: "forced with a budget", budget: 160 * mib, avail: 2 * all, force: true, host: true, slots: 16, why: "--ram-budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := planRAMTier(ramTierInput{Budget: tc.budget, Avail: tc.avail, Force: tc.force, Experts: ex, Pinned: all})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--ram-budget") {
					t.Fatalf("err %v, want one containing %q and saying what to raise", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.hostPlanned != tc.host || got.slots != tc.slots || !strings.Contains(got.why, tc.why) {
				t.Fatalf("got %+v, want host-planned %v with %d slots sized by %q", got, tc.host, tc.slots, tc.why)
			}
		})
	}
}

// A host-planned plan counts its RAM tier and the disk, pins nothing until
// the tier's slabs are registered, and its lines say the split and the
// mode, with the reason when the slabs could not be page-locked.
func TestHostPlannedPlanLines(t *testing.T) {
	const mib = 1 << 20
	p, err := PlanExperts(PlanInput{Budget: 1536 * mib, TrunkBytes: 1024 * mib, StateBytes: 256 * mib, PlanContext: 4096, Stride: mib, Layers: 10, Experts: 64, TopK: 4})
	if err != nil {
		t.Fatal(err)
	}
	p.setRAMTier(8, "--ram-budget")
	if !p.HostPlanned || p.RAMBytes != 80*mib || p.DiskBytes != p.ExpertBytes-80*mib || p.PinnedBytes != 0 {
		t.Fatalf("plan %+v: want an 80 MiB RAM tier, the rest on disk, nothing pinned yet", p)
	}
	p.RAMMode, p.RAMNote = "direct", "not page-locked (cuMemHostRegister: CUDA_ERROR_NOT_SUPPORTED): copies run from pageable memory"
	text := strings.Join(p.Lines(), "\n")
	for _, want := range []string{"host-planned", "19 of 64 a layer", "RAM tier 0.08 GiB (8 of 64 experts a layer, sized by --ram-budget; not page-locked", "read from disk (direct reads)", "no decode graph"} {
		if !strings.Contains(text, want) {
			t.Errorf("plan lines lack %q:\n%s", want, text)
		}
	}
	p.RAMLocked, p.RAMNote = true, ""
	if text := strings.Join(p.Lines(), "\n"); !strings.Contains(text, "sized by --ram-budget; page-locked)") {
		t.Errorf("a page-locked tier's lines:\n%s", text)
	}
}

// A prefill pass stages each routed expert once (ascending), in batches of
// at most the RAM tier's experts a layer; a pick outside the layer is an
// error naming it.
func TestHostStagingPlan(t *testing.T) {
	need, err := neededExperts([]int32{5, 1, 5, 9, 1, 0, 9, 3}, 16)
	if err != nil || !slices.Equal(need, []int{0, 1, 3, 5, 9}) {
		t.Fatalf("needed %v (%v), want [0 1 3 5 9]", need, err)
	}
	if _, err := neededExperts([]int32{1, 16}, 16); err == nil || !strings.Contains(err.Error(), "expert 16 of 16") {
		t.Fatalf("a pick past the experts: %v", err)
	}
	for _, tc := range []struct {
		n, per int
		want   []int
	}{{0, 4, nil}, {3, 4, []int{3}}, {4, 4, []int{4}}, {9, 4, []int{4, 4, 1}}, {8, 1, []int{1, 1, 1, 1, 1, 1, 1, 1}}} {
		ids := make([]int, tc.n)
		for i := range ids {
			ids[i] = 10 * i
		}
		var sizes []int
		var joined []int
		for _, b := range batches(ids, tc.per) {
			sizes = append(sizes, len(b))
			joined = append(joined, b...)
		}
		if !slices.Equal(sizes, tc.want) || !slices.Equal(joined, ids) {
			t.Errorf("%d ids by %d: batches of %v covering %v, want %v covering every id once", tc.n, tc.per, sizes, joined, tc.want)
		}
	}
}

// A decode step whose copies fail forgets the slots it gave the misses, so
// a later step copies them again instead of taking stale slots for hits;
// its hits stay.
func TestSlotRefForgetsFailedCopies(t *testing.T) {
	r := newSlotRef(16, 6)
	r.resolve([]int32{1, 2, 3})
	slots := r.resolve([]int32{1, 4, 5}) // 4 and 5 miss
	fill := slices.Clone(r.fill)
	r.forget(fill)
	for _, f := range fill {
		if r.slotOf[f[1]] != -1 || r.expertOf[f[0]] != -1 {
			t.Fatalf("expert %d still in slot %d after its copy failed", f[1], f[0])
		}
	}
	if r.slotOf[1] != slots[0] {
		t.Fatalf("the hit on expert 1 lost its slot")
	}
	hits, misses := r.hits, r.misses
	r.resolve([]int32{4, 5, 1})
	if r.misses-misses != 2 || r.hits-hits != 1 {
		t.Fatalf("after forgetting: %d misses %d hits, want 2 and 1", r.misses-misses, r.hits-hits)
	}
	// forget leaves a slot another expert has since taken.
	r.forget([][2]int32{{r.slotOf[4], 9}})
	if r.slotOf[4] < 0 {
		t.Fatal("forget emptied a slot holding another expert")
	}
}

// The bench's tier figures are differences per token.
func TestTierStats(t *testing.T) {
	before := StreamStats{DecodeHits: 10, DecodeMisses: 10, DecodeBytes: 100, HostTierStats: HostTierStats{RAMHits: 5, RAMMisses: 5, DiskBytes: 50, AcquireSeconds: 1, SyncSeconds: 2}}
	after := StreamStats{DecodeHits: 40, DecodeMisses: 20, DecodeBytes: 1100, HostTierStats: HostTierStats{RAMHits: 11, RAMMisses: 9, DiskBytes: 450, AcquireSeconds: 1.5, SyncSeconds: 2.25}}
	got := tierStats(before, after, 10)
	want := TierStats{Tokens: 10, VRAMHitRate: 0.75, RAMHitRate: 0.6, PCIeBytesPerToken: 100, DiskBytesPerToken: 40, DiskWaitMsPerToken: 50, SyncMsPerToken: 25}
	if *got != want {
		t.Fatalf("got %+v, want %+v", *got, want)
	}
}

// loadHostPlanned loads dir on the GPU with NVMAI_GPU_SLOTS=slots VRAM
// slots a layer and a RAM tier of ramSlots experts a layer (--ram-budget),
// below every expert, so the host plans and the disk is read. The caller
// closes it.
func loadHostPlanned(t *testing.T, dir string, slots, ramSlots int, vram int64) (*runtime.Engine, error) {
	t.Helper()
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := ""
	if slots > 0 {
		v = strconv.Itoa(slots)
	}
	t.Setenv("NVMAI_GPU_SLOTS", v)
	budget := int64(ramSlots) * m.Experts.Stride * int64(len(m.Experts.Layers))
	return runtime.Load(dir, runtime.Options{Threads: 4, Device: model.GPU, VRAMBudget: vram, Experts: runtime.ExpertOptions{Budget: budget}})
}

// compareHostPlanned loads dir host-planned (loadHostPlanned: slots
// forced, 0 for the plan's own, which must give wantSlots) and checks its
// outputs against the resident engine's (want), bitwise; its plan; its counters (VRAM misses are
// RAM-tier requests, RAM misses disk reads of a record each); its bench
// figures; and that closing it gives its device memory back.
func compareHostPlanned(t *testing.T, dir string, probe *cuda.Device, want streamOutputs, ids []int, slots, wantSlots, ramSlots int, vram int64) {
	t.Helper()
	name := fmt.Sprintf("%s, %d VRAM slots, RAM tier %d", filepath.Base(dir), wantSlots, ramSlots)
	if v := os.Getenv("NVMAI_GPU_RAM_PAGEABLE"); v != "" {
		name += ", NVMAI_GPU_RAM_PAGEABLE=" + v
	}
	before := freeVRAM(t, probe)
	e, err := loadHostPlanned(t, dir, slots, ramSlots, vram)
	if err != nil {
		t.Fatal(err)
	}
	b := e.Model().(*Backend)
	p := b.Model.Plan()
	got := runOutputs(t, e, ids)
	st, ok, err := b.Model.StreamStats()
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	x := b.ExpertStats()
	info, merr := b.Measure(16, 8)
	e.Close()
	after := freeVRAM(t, probe)
	t.Logf("FIDELITY host-planned %s: %d of %d VRAM slots a layer, RAM tier %d a layer (page-locked %v %s), H2D %.1f GB/s; logits bitwise the resident engine's %v, greedy equal %v, sampled equal %v; decode VRAM hits %d misses %d; prefill %d from VRAM %d from RAM; RAM tier hits %d misses %d, %d bytes from disk in %.3f s; host blocked %.3f s on the tier, %.3f s on syncs; VRAM free %d MiB before, %d after Close",
		name, p.Slots, p.Experts, p.RAMSlots, p.RAMLocked, p.RAMNote, p.H2D/1e9, slices.Equal(got.logits, want.logits), slices.Equal(got.greedy, want.greedy),
		slices.EqualFunc(got.sampled, want.sampled, slices.Equal), st.DecodeHits, st.DecodeMisses, st.PrefillFromVRAM, st.PrefillFromHost,
		st.RAMHits, st.RAMMisses, st.DiskBytes, st.DiskSeconds, st.AcquireSeconds, st.SyncSeconds, before>>20, after>>20)
	if !ok || !p.HostPlanned || p.Slots != wantSlots || p.RAMSlots != ramSlots || !st.HostPlanned || (p.RAMLocked && os.Getenv("NVMAI_GPU_RAM_PAGEABLE") == "1") {
		t.Fatalf("%s: plan %+v, want host-planned with %d VRAM and %d RAM slots a layer", name, p, wantSlots, ramSlots)
	}
	checkSameOutputs(t, name, got, want)
	if st.DecodeMisses == 0 || st.DecodeHits == 0 || st.PrefillFromHost == 0 || st.RAMMisses == 0 || st.DiskBytes == 0 ||
		st.DecodeBytes != st.DecodeMisses*p.Stride || st.PrefillBytes != st.PrefillFromHost*p.Stride ||
		st.RAMHits+st.RAMMisses != st.DecodeMisses+st.PrefillFromHost || st.DiskBytes != st.RAMMisses*p.Stride || st.Guesses != 0 {
		t.Errorf("%s: counters %+v do not add up", name, st)
	}
	if x.Hits != st.DecodeHits+st.PrefillFromVRAM || x.Misses != st.DecodeMisses+st.PrefillFromHost || x.ReadSeconds != st.DiskSeconds || x.WaitSeconds <= 0 {
		t.Errorf("%s: ExpertStats %+v from counters %+v", name, x, st)
	}
	if merr != nil || info.Tiers == nil || info.Tiers.Tokens != 8 || info.GraphMsPerToken != 0 || info.EagerMsPerToken <= 0 {
		t.Errorf("%s: bench figures %+v (tiers %+v): %v", name, info, info.Tiers, merr)
	}
	checkVRAMBack(t, name, before, after)
}

// Host-planned streaming (RAM cannot hold every expert) gives bitwise the
// resident engine's logits, 64 greedy tokens and seeded sampled tokens
// after a prompt of several prefill passes (NVMAI_GPU_CHUNK=128), on the
// tiny-moe fixture at 4 and 8 bits: VRAM slots at 3·top-k = 12, E/2 = 8
// and top-k = 4 a layer, a RAM tier of top-k + 1 = 5 and of top-k = 4
// experts a layer (every prefill batch fills it: a sync between batches),
// page-locked and pageable (NVMAI_GPU_RAM_PAGEABLE=1); 4-bit unfused too
// (NVMAI_GPU_FUSE=0: qgemv gathers by slot). And the routing replay under
// synthetic:agent through the host plan (NVMAI_GPU_HOST_PLANNED=1) is the
// CPU engine's, bitwise.
func TestHostPlannedMatchesResident(t *testing.T) {
	needGPU(t)
	ids := severalPassPrompt(t)
	probe := openProbe(t)
	eachResidentFixture(t, []fixtureCase{{4, ""}, {8, ""}, {4, "0"}}, ids, func(t *testing.T, tc fixtureCase, dir string, want streamOutputs) {
		for _, c := range []struct {
			slots, ram int
			pageable   string
		}{{12, 5, ""}, {8, 4, ""}, {4, 5, ""}, {8, 5, "1"}} {
			t.Setenv("NVMAI_GPU_RAM_PAGEABLE", c.pageable)
			compareHostPlanned(t, dir, probe, want, ids, c.slots, c.slots, c.ram, 0)
		}
		t.Setenv("NVMAI_GPU_RAM_PAGEABLE", "")
		if tc.fuse != "" {
			return
		}
		cpu := loadEngine(t, dir, false)
		src := synthSource(t, cpu, "synthetic:agent")
		wantReplay := replayRun(t, cpu, ids, src, 64)
		t.Setenv("NVMAI_GPU_HOST_PLANNED", "1")
		compareReplay(t, fmt.Sprintf("tiny-moe %d-bit synthetic:agent host-planned at 8 slots", tc.bits), dir, 8, ids, src, wantReplay, true)
		t.Setenv("NVMAI_GPU_HOST_PLANNED", "")
	})
}

// The synthetic 35B-A3B geometry (NVMAI_SYNTH_DIRS, installs of at most 8
// layers; NVMAI_STREAM_BIG=1 takes them all) host-planned: a VRAM budget
// sized from the resident plan for 3·top-k slots a layer, a RAM tier of
// 2·top-k and of top-k experts a layer: bitwise the resident engine,
// through prefill passes of 64 tokens.
func TestHostPlannedSyntheticMatchesResident(t *testing.T) {
	eachResidentSynth(t, func(t *testing.T, dir string, probe *cuda.Device, ids []int, p Plan, want streamOutputs) {
		slots := 3 * p.TopK
		budget := slotsBudget(p, slots)
		t.Setenv("NVMAI_GPU_SLOTS", "")
		for _, ram := range []int{2 * p.TopK, p.TopK} {
			compareHostPlanned(t, dir, probe, want, ids, 0, slots, ram, budget)
		}
	})
}

// A damaged expert file under host-planned streaming: truncated before the
// load, the load fails naming it; truncated under a loaded engine, the
// generation that reads past its end fails naming it, and closing the
// engine gives its device memory back either way.
func TestHostPlannedDamagedExpertFile(t *testing.T) {
	needGPU(t)
	probe := openProbe(t)
	src := install(t, "tiny-moe-fused", 4)
	m, _, err := packexperts.ReadManifest(src)
	if err != nil {
		t.Fatal(err)
	}
	copyInstall := func() (string, string) { // a private copy: the shared install stays whole
		dir := t.TempDir()
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			to := filepath.Join(dir, rel)
			if d.IsDir() {
				return os.MkdirAll(to, 0o755)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
		return dir, filepath.Join(dir, filepath.FromSlash(m.Experts.Layers[0].File))
	}
	before := freeVRAM(t, probe)
	dir, victim := copyInstall()
	if err := os.Truncate(victim, m.Experts.Stride); err != nil {
		t.Fatal(err)
	}
	if e, err := loadHostPlanned(t, dir, 8, 4, 0); err == nil {
		e.Close()
		t.Errorf("a truncated expert file loaded")
	} else if !strings.Contains(err.Error(), victim) {
		t.Errorf("load error %q does not name %s", err, victim)
	}
	dir, victim = copyInstall()
	e, err := loadHostPlanned(t, dir, 8, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(victim, m.Experts.Stride); err != nil {
		e.Close()
		t.Fatal(err)
	}
	var ids []int
	for i := range 300 {
		ids = append(ids, 1+(i*7919)%(m.Geometry.VocabSize-1))
	}
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32})
	_, gerr := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: 8, IgnoreEOS: true})
	s.Close()
	e.Close()
	t.Logf("a truncated expert file under a loaded engine: %v", gerr)
	if gerr == nil || !strings.Contains(gerr.Error(), victim) {
		t.Errorf("generation error %v does not name %s", gerr, victim)
	}
	if after := freeVRAM(t, probe); before-after > 32<<20 {
		t.Errorf("%d MiB of VRAM not given back after the failures", (before-after)>>20)
	}
}

// fakeDevice is device memory on the host for the host plan's bookkeeping
// tests: every copy is queued and runs at the next sync (or read back), in
// order, reading its source then, as an asynchronous copy from page-locked
// memory may; a RAM slot released before its copy ran would show as wrong
// bytes.
type fakeDevice struct {
	mem   []byte
	next  int64
	queue []func()
	syncs int
}

const fakeBase = 1 << 20

func (f *fakeDevice) alloc(n int64) cuda.DevicePtr {
	p := f.next
	f.next += (n + 15) &^ 15
	f.mem = append(f.mem, make([]byte, f.next-int64(len(f.mem)))...)
	return cuda.DevicePtr(fakeBase + p)
}

func (f *fakeDevice) at(p cuda.DevicePtr, n int64) []byte {
	off := int64(p) - fakeBase
	return f.mem[off : off+n]
}

func (f *fakeDevice) Sync() error {
	for _, op := range f.queue {
		op()
	}
	f.queue = f.queue[:0]
	f.syncs++
	return nil
}

func (f *fakeDevice) DtoH(dst []byte, src cuda.DevicePtr) error {
	f.Sync()
	copy(dst, f.at(src, int64(len(dst))))
	return nil
}

func (f *fakeDevice) HtoDAsync(dst cuda.DevicePtr, src []byte) error {
	f.queue = append(f.queue, func() { copy(f.at(dst, int64(len(src))), src) })
	return nil
}

func (f *fakeDevice) DtoD(dst, src cuda.DevicePtr, n uint64) error {
	f.queue = append(f.queue, func() { copy(f.at(dst, int64(n)), f.at(src, int64(n))) })
	return nil
}

// hostPlanFixture is a host-planned model over the tiny-moe install's
// expert files with fake device memory: S VRAM slots and ramSlots RAM
// slots a layer.
type hostPlanFixture struct {
	m     *Model
	st    *State
	dev   *fakeDevice
	files [][]byte // each layer's expert file
	sls   []*streamLayer
	E, k  int
	T     int // the most tokens a pass carries
}

func newHostPlanFixture(t *testing.T, dir string, S, ramSlots int) *hostPlanFixture {
	t.Helper()
	man, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	x := man.Experts
	cache, err := expertcache.New(dir, man, expertcache.Options{Slots: ramSlots, Prefetch: -1, NoWarm: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	fx := &hostPlanFixture{dev: &fakeDevice{}, E: x.Count, k: x.TopK, T: 64}
	L := len(x.Layers)
	h := &hostTier{cache: cache, layers: map[*streamLayer]*hostLayer{}, slotBuf: make([]byte, 4*x.TopK*L)}
	fx.m = &Model{geom: geometry{E: x.Count, k: x.TopK}, stream: &streamer{slots: S, stride: x.Stride, staging: fx.dev.alloc(int64(x.Count) * x.Stride), host: h}}
	fx.st = &State{}
	fx.st.s.sel = fx.dev.alloc(int64(4 * fx.T * x.TopK))
	for i, l := range x.Layers {
		b, err := os.ReadFile(filepath.Join(dir, l.File))
		if err != nil {
			t.Fatal(err)
		}
		fx.files = append(fx.files, b)
		sl := &streamLayer{pool: fx.dev.alloc(int64(S) * x.Stride), slotSel: fx.dev.alloc(int64(4 * x.TopK))}
		fx.sls = append(fx.sls, sl)
		h.addHostLayer(sl, i, i, x.Count, S, x.TopK)
	}
	return fx
}

// route writes a pass's picks where the route kernel would.
func (fx *hostPlanFixture) route(picks []int32) {
	copy(fx.dev.at(fx.st.s.sel, int64(4*len(picks))), cuda.Bytes(picks))
}

func (fx *hostPlanFixture) record(layer, e int) []byte {
	s := fx.m.stream.stride
	return fx.files[layer][int64(e)*s : int64(e+1)*s]
}

// The host plan's bookkeeping on fake device memory whose copies run late:
// over random decode steps (a hot set) and prefill passes between them,
// across every layer, each decode pick's slot (as uploaded) holds its
// expert's record byte for byte, each prefill pass's staging holds every
// expert it routes to, the slot table is the reference LRU's (prefill
// leaves it alone), and the counters add up (VRAM misses are RAM-tier
// requests, RAM misses a record read from disk each). At top-k and 3·top-k
// VRAM slots, RAM tiers of top-k (every batch fills it), top-k+1 and
// every expert.
func TestHostPlanBookkeeping(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	for _, c := range []struct{ S, ram int }{{4, 4}, {4, 5}, {12, 4}, {12, 16}} {
		t.Run(fmt.Sprintf("S=%d/ram=%d", c.S, c.ram), func(t *testing.T) {
			fx := newHostPlanFixture(t, dir, c.S, c.ram)
			E, k, L := fx.E, fx.k, len(fx.sls)
			refs := make([]*slotRef, L)
			for i := range refs {
				refs[i] = newSlotRef(E, c.S)
			}
			rng := rand.New(rand.NewPCG(3, uint64(c.S*100+c.ram)))
			pick := func() []int32 {
				var p []int32
				for len(p) < k {
					e := int32(rng.IntN(E))
					if rng.IntN(10) < 6 {
						e = int32(rng.IntN(6))
					}
					if !slices.Contains(p, e) {
						p = append(p, e)
					}
				}
				return p
			}
			var decodePicks, prefillNeeded int64
			for step := range 60 {
				if step%15 == 7 { // a prefill pass
					T := 1 + rng.IntN(fx.T)
					for i, sl := range fx.sls {
						var picks []int32
						for range T {
							picks = append(picks, pick()...)
						}
						fx.route(picks)
						before := slices.Clone(fx.m.stream.host.layers[sl].ref.words(k))
						if err := fx.m.hostStage(fx.dev, fx.st, sl, fx.m.stream.host.layers[sl], T); err != nil {
							t.Fatal(err)
						}
						fx.dev.Sync()
						need, _ := neededExperts(picks, E)
						prefillNeeded += int64(len(need))
						for _, e := range need {
							if !bytes.Equal(fx.dev.at(fx.m.stream.staging+cuda.DevicePtr(int64(e)*fx.m.stream.stride), fx.m.stream.stride), fx.record(i, e)) {
								t.Fatalf("step %d layer %d: staged expert %d differs from its record", step, i, e)
							}
						}
						if !slices.Equal(before, fx.m.stream.host.layers[sl].ref.words(k)) {
							t.Fatalf("step %d layer %d: prefill changed the slot table", step, i)
						}
					}
					continue
				}
				for i, sl := range fx.sls {
					picks := pick()
					fx.route(picks)
					hl := fx.m.stream.host.layers[sl]
					if err := fx.m.hostDecode(fx.dev, fx.st, sl, hl); err != nil {
						t.Fatal(err)
					}
					want := refs[i].resolve(picks)
					fx.dev.Sync() // the layer's products run after its copies
					got := unsafeInt32s(bytes.Clone(fx.dev.at(sl.slotSel, int64(4*k))))
					if !slices.Equal(got, want) {
						t.Fatalf("step %d layer %d: slots %v, the reference LRU's %v", step, i, got, want)
					}
					for j, e := range picks {
						if !bytes.Equal(fx.dev.at(sl.pool+cuda.DevicePtr(int64(got[j])*fx.m.stream.stride), fx.m.stream.stride), fx.record(i, int(e))) {
							t.Fatalf("step %d layer %d: slot %d holds the wrong bytes for expert %d", step, i, got[j], e)
						}
					}
					decodePicks += int64(k)
				}
			}
			s := fx.m.stream.host.streamStats(L)
			if s.DecodeHits+s.DecodeMisses != decodePicks || s.PrefillFromVRAM+s.PrefillFromHost != prefillNeeded ||
				s.RAMHits+s.RAMMisses != s.DecodeMisses+s.PrefillFromHost || s.DiskBytes != s.RAMMisses*fx.m.stream.stride ||
				s.DecodeBytes != s.DecodeMisses*fx.m.stream.stride || s.PrefillBytes != s.PrefillFromHost*fx.m.stream.stride || s.RAMMisses == 0 {
				t.Fatalf("counters %+v: %d decode picks, %d prefill experts", s, decodePicks, prefillNeeded)
			}
			if c.ram == E && s.RAMMisses > int64(L*E) {
				t.Errorf("a RAM tier holding every expert read %d records, more than the %d there are", s.RAMMisses, L*E)
			}
			t.Logf("S=%d ram=%d: decode VRAM hits %d misses %d, prefill %d from VRAM %d from RAM, RAM hits %d misses %d, %d syncs",
				c.S, c.ram, s.DecodeHits, s.DecodeMisses, s.PrefillFromVRAM, s.PrefillFromHost, s.RAMHits, s.RAMMisses, fx.dev.syncs)
		})
	}
}

// A record the disk tier cannot read (its file truncated under the cache)
// fails the decode step with an error naming the file, and the slots its
// misses were given are forgotten, so no later step takes them for hits.
func TestHostPlanDiskErrorForgetsSlots(t *testing.T) {
	src := install(t, "tiny-moe-fused", 4)
	dir := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	fx := newHostPlanFixture(t, dir, 8, 4)
	man, _, _ := packexperts.ReadManifest(dir)
	victim := filepath.Join(dir, man.Experts.Layers[0].File)
	if err := os.Truncate(victim, 2*man.Experts.Stride); err != nil { // experts 0 and 1 remain
		t.Fatal(err)
	}
	sl := fx.sls[0]
	hl := fx.m.stream.host.layers[sl]
	fx.route([]int32{0, 1, 2, 3})
	err = fx.m.hostDecode(fx.dev, fx.st, sl, hl)
	if err == nil || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "layer 0") {
		t.Fatalf("reading past the truncated file: %v, want an error naming %s and the layer", err, victim)
	}
	for _, e := range []int{0, 1, 2, 3} {
		if hl.ref.slotOf[e] >= 0 {
			t.Errorf("expert %d keeps slot %d after its copy failed", e, hl.ref.slotOf[e])
		}
	}
}
