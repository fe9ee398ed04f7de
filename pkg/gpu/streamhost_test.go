package gpu

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The host plan's bookkeeping (and its host-only tests) is expertstream's
// (host.go); these run pkg/gpu's engine host-planned on the GPU.

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
	} else if rel := m.Experts.Layers[0].File; !strings.Contains(err.Error(), victim) &&
		!(strings.Contains(err.Error(), dir) && strings.Contains(err.Error(), rel)) {
		// The receipt check names the install and the file within it.
		t.Errorf("load error %q names neither %s nor %s within %s", err, victim, rel, dir)
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
