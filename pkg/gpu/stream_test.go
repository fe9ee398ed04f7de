package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// loadGPUWith loads dir on the GPU with a VRAM budget (0: auto) and
// NVMAI_GPU_SLOTS=slots (0: the plan decides). The caller closes it.
func loadGPUWith(t *testing.T, dir string, slots int, budget int64) *runtime.Engine {
	t.Helper()
	v := ""
	if slots > 0 {
		v = strconv.Itoa(slots)
	}
	t.Setenv("NVMAI_GPU_SLOTS", v)
	e, err := runtime.Load(dir, runtime.Options{Threads: 4, Device: model.GPU, VRAMBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// freeVRAM is the device memory free now, as seen through probe (which
// keeps the primary context alive between the engines).
func freeVRAM(t *testing.T, probe *cuda.Device) int64 {
	t.Helper()
	var free uint64
	if err := probe.Do(func(c *cuda.Ctx) (err error) { free, _, err = c.MemInfo(); return }); err != nil {
		t.Fatal(err)
	}
	return int64(free)
}

// openProbe opens device 0 for freeVRAM until the test ends, keeping the
// primary context alive between the engines.
func openProbe(t *testing.T) *cuda.Device {
	t.Helper()
	probe, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(probe.Close)
	return probe
}

// severalPassPrompt sets prefill passes of 128 tokens (NVMAI_GPU_CHUNK)
// and returns the longest prompt of tiny-moe.refs.json, which must take
// several of them.
func severalPassPrompt(t *testing.T) []int {
	t.Helper()
	t.Setenv("NVMAI_GPU_CHUNK", "128")
	var ids []int
	for _, r := range loadRefs(t, "tiny-moe.refs.json") {
		if len(r.IDs) > len(ids) {
			ids = r.IDs
		}
	}
	if len(ids) <= 2*128 {
		t.Fatalf("the longest refs prompt has %d tokens: not several passes of 128", len(ids))
	}
	return ids
}

// residentOutputs loads dir on the GPU with the plan's own budget, which
// must hold every expert (what: the install, for the failure), and runs
// ids through it: the plan, and the outputs a streamed engine must
// reproduce.
func residentOutputs(t *testing.T, dir, what string, ids []int) (Plan, streamOutputs) {
	t.Helper()
	res := loadGPUWith(t, dir, 0, 0)
	p := res.Model().(*Backend).Model.Plan()
	if !p.Resident() {
		res.Close()
		t.Fatalf("the %s does not load resident: %+v", what, p)
	}
	want := runOutputs(t, res, ids)
	res.Close()
	return p, want
}

// fixtureCase is the tiny-moe fixture at bits, its decode unfused when
// fuse is "0" (NVMAI_GPU_FUSE: qgemv gathers by slot).
type fixtureCase struct {
	bits int
	fuse string
}

// eachResidentFixture runs check in a subtest a case ("4-bit",
// "4-bit-unfused") with NVMAI_GPU_FUSE set, on the fixture installed at
// the case's bits, with the resident engine's outputs of ids there.
func eachResidentFixture(t *testing.T, cases []fixtureCase, ids []int, check func(t *testing.T, tc fixtureCase, dir string, want streamOutputs)) {
	t.Helper()
	for _, tc := range cases {
		name := fmt.Sprintf("%d-bit", tc.bits)
		if tc.fuse == "0" {
			name += "-unfused"
		}
		t.Run(name, func(t *testing.T) {
			t.Setenv("NVMAI_GPU_FUSE", tc.fuse)
			dir := install(t, "tiny-moe-fused", tc.bits)
			_, want := residentOutputs(t, dir, "fixture", ids)
			check(t, tc, dir, want)
		})
	}
}

// streamOutputs are what the streamed engine must reproduce bitwise.
type streamOutputs struct {
	logits  []float32
	greedy  []int
	sampled [][]int
}

// streamSampling is the seeded sampling the streamed checks compare: the
// generation config's filters, and none.
var streamSampling = []sample.Params{sampleParams[0], sampleParams[3]}

func runOutputs(t *testing.T, e *runtime.Engine, ids []int) streamOutputs {
	t.Helper()
	o := streamOutputs{logits: lastLogits(t, e, ids), greedy: greedy(t, e, ids, 65)} // 64 decode steps
	for _, p := range streamSampling {
		s, _ := sampledTokens(t, e, ids, 32, p, false)
		o.sampled = append(o.sampled, s)
	}
	return o
}

// checkSameOutputs reports each way got differs from the resident
// engine's outputs want.
func checkSameOutputs(t *testing.T, name string, got, want streamOutputs) {
	t.Helper()
	if !slices.Equal(got.logits, want.logits) {
		t.Errorf("%s: logits differ from the resident engine's (max %g)", name, cudatest.MaxAbsDiff(got.logits, want.logits))
	}
	if !slices.Equal(got.greedy, want.greedy) {
		t.Errorf("%s: greedy %v, resident %v", name, got.greedy, want.greedy)
	}
	for i := range want.sampled {
		if !slices.Equal(got.sampled[i], want.sampled[i]) {
			t.Errorf("%s: sampled %+v: %v, resident %v", name, streamSampling[i], got.sampled[i], want.sampled[i])
		}
	}
}

// checkVRAMBack fails unless closing an engine gave its device memory
// back: free VRAM before loading it and after closing it within 32 MiB
// (the kernels' module stays loaded with the context: a few MiB).
func checkVRAMBack(t *testing.T, name string, before, after int64) {
	t.Helper()
	if before-after > 32<<20 {
		t.Errorf("%s: %d MiB of VRAM not given back after Close", name, (before-after)>>20)
	}
}

// compareStreamed checks a streamed engine's outputs against the
// resident one's, its plan and counters, and that closing it gives its
// device memory back.
func compareStreamed(t *testing.T, name string, probe *cuda.Device, want streamOutputs, ids []int, load func() *runtime.Engine, slots int) {
	t.Helper()
	before := freeVRAM(t, probe)
	e := load()
	b := e.Model().(*Backend)
	p := b.Model.Plan()
	ahead := b.Model.stream != nil && b.Model.stream.readAhead
	got := runOutputs(t, e, ids)
	st, ok, err := b.Model.StreamStats()
	e.Close()
	if err != nil {
		t.Fatal(err)
	}
	after := freeVRAM(t, probe)
	t.Logf("FIDELITY streamed %s: %d of %d slots a layer, H2D %.1f GB/s, read-ahead %v; logits bitwise the resident engine's %v, greedy equal %v, sampled equal %v; decode hits %d misses %d (%d bytes), read-ahead %d guesses %d right, %d copied ahead %d used (%d bytes); prefill %d from VRAM %d from RAM (%d bytes); VRAM free %d MiB before, %d after Close",
		name, p.Slots, p.Experts, p.H2D/1e9, ahead, slices.Equal(got.logits, want.logits), slices.Equal(got.greedy, want.greedy),
		slices.EqualFunc(got.sampled, want.sampled, slices.Equal), st.DecodeHits, st.DecodeMisses, st.DecodeBytes,
		st.Guesses, st.Guessed, st.AheadCopies, st.AheadUsed, st.AheadBytes,
		st.PrefillFromVRAM, st.PrefillFromHost, st.PrefillBytes, before>>20, after>>20)
	if !ok || p.Resident() || p.Slots != slots {
		t.Fatalf("%s: plan %+v, want %d slots a layer streamed", name, p, slots)
	}
	checkSameOutputs(t, name, got, want)
	if st.DecodeMisses+st.AheadCopies == 0 || st.DecodeHits+st.DecodeMisses == 0 || st.PrefillFromHost == 0 || st.DecodeBytes != st.DecodeMisses*p.Stride {
		t.Errorf("%s: counters %+v do not show decode copies and prefill staging", name, st)
	}
	if ahead != (st.Guesses > 0) || st.AheadBytes != st.AheadCopies*p.Stride || st.Guessed > st.Guesses || st.AheadUsed > st.AheadCopies {
		t.Errorf("%s: read-ahead %v but counters %d guesses, %d right, %d copied ahead (%d bytes), %d used", name, ahead, st.Guesses, st.Guessed, st.AheadCopies, st.AheadBytes, st.AheadUsed)
	}
	checkVRAMBack(t, name, before, after)
}

// Streamed experts give bitwise the resident engine's logits, 65 greedy
// tokens and seeded sampled tokens after a prompt of several prefill
// passes (NVMAI_GPU_CHUNK=128), on the tiny-moe fixture at 4, 8 and 16
// bits (the fused decode launches, the unfused float path, and at 4 bits
// the unfused quantized one, NVMAI_GPU_FUSE=0) with
// 3·top-k = 12 and E/2 = 8 slots a layer (NVMAI_GPU_SLOTS: the fixture's
// 16 experts fit any budget), with the read-ahead (the default), and at 8
// slots without it (NVMAI_GPU_READAHEAD=0) and at top-k = 4 slots with it,
// where every guess that misses evicts a slot the step may pick; the
// read-ahead at distances 0 (the default), 1 and 2
// (NVMAI_GPU_READAHEAD_DIST: guessed from the hidden state that many
// layers earlier, several layers' copies in flight at once).
func TestStreamedMatchesResident(t *testing.T) {
	needGPU(t)
	ids := severalPassPrompt(t)
	probe := openProbe(t)
	eachResidentFixture(t, []fixtureCase{{4, ""}, {8, ""}, {16, ""}, {4, "0"}}, ids, func(t *testing.T, tc fixtureCase, dir string, want streamOutputs) {
		for _, c := range []struct {
			slots       int
			ahead, dist string
		}{{12, "", "1"}, {8, "", "0"}, {8, "", "1"}, {8, "", "2"}, {8, "0", ""}, {4, "", "0"}, {4, "", "1"}, {4, "", "2"}} {
			t.Setenv("NVMAI_GPU_READAHEAD", c.ahead)
			t.Setenv("NVMAI_GPU_READAHEAD_DIST", c.dist)
			compareStreamed(t, fmt.Sprintf("tiny-moe %d-bit, %d slots, read-ahead %q distance %q", tc.bits, c.slots, c.ahead, c.dist), probe, want, ids,
				func() *runtime.Engine { return loadGPUWith(t, dir, c.slots, 0) }, c.slots)
		}
	})
}

// The synthetic 35B-A3B geometry (NVMAI_SYNTH_DIRS, installs of at most 8
// layers; NVMAI_STREAM_BIG=1 takes them all) streamed under two VRAM
// budgets, sized from the resident plan to give 24 (3·top-k) and 128
// slots a layer: bitwise the resident engine, through prefill passes of 64
// tokens; with the read-ahead at distances 1 and 2, and at 24 slots at
// distance 0 (the default) and without it too.
func TestStreamedSyntheticMatchesResident(t *testing.T) {
	eachResidentSynth(t, func(t *testing.T, dir string, probe *cuda.Device, ids []int, p Plan, want streamOutputs) {
		for _, c := range []struct {
			slots       int
			ahead, dist string
		}{{3 * p.TopK, "", ""}, {3 * p.TopK, "", "1"}, {3 * p.TopK, "", "2"}, {3 * p.TopK, "0", ""}, {128, "", "1"}, {128, "", "2"}} {
			t.Setenv("NVMAI_GPU_READAHEAD", c.ahead)
			t.Setenv("NVMAI_GPU_READAHEAD_DIST", c.dist)
			budget := slotsBudget(p, c.slots)
			compareStreamed(t, fmt.Sprintf("%s at %s, read-ahead %q distance %q", filepath.Base(dir), gib(budget), c.ahead, c.dist), probe, want, ids,
				func() *runtime.Engine { return loadGPUWith(t, dir, 0, budget) }, c.slots)
		}
	})
}

// eachResidentSynth runs check in a subtest for each synthetic install
// NVMAI_SYNTH_DIRS names (of at most 8 layers: smallSynth), in prefill
// passes of 64 tokens, with a prompt of 200 ids, the resident engine's
// plan and outputs of it there, and a probe for freeVRAM.
func eachResidentSynth(t *testing.T, check func(t *testing.T, dir string, probe *cuda.Device, ids []int, p Plan, want streamOutputs)) {
	t.Helper()
	needGPU(t)
	t.Setenv("NVMAI_GPU_CHUNK", "64")
	probe := openProbe(t)
	for _, dir := range envDirs(t, "NVMAI_SYNTH_DIRS", "synthetic install") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			smallSynth(t, dir, "streams")
			ids := synthIDs(200)
			p, want := residentOutputs(t, dir, "synthetic install", ids)
			check(t, dir, probe, ids, p, want)
		})
	}
}

// slotsBudget is the VRAM budget under which the resident plan p's model
// streams at slots slots a layer: the trunk, the state, a staging buffer
// of every expert, the slot pools, and half a record to spare.
func slotsBudget(p Plan, slots int) int64 {
	return p.TrunkBytes + p.StateBytes + int64(p.Experts)*p.Stride + int64(slots)*p.Stride*int64(p.Layers) + p.Stride/2
}

// smallSynth reads the synthetic install dir's manifest, skipping an
// install of more than 8 layers unless NVMAI_STREAM_BIG=1 (does: what the
// test would do with it, for the skip's reason).
func smallSynth(t *testing.T, dir, does string) *packexperts.Manifest {
	t.Helper()
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Geometry.NumLayers > 8 && os.Getenv("NVMAI_STREAM_BIG") != "1" {
		t.Skipf("%d layers: NVMAI_STREAM_BIG=1 %s it", m.Geometry.NumLayers, does)
	}
	return m
}

// synthIDs is an n-token prompt of ids in [100, 5100).
func synthIDs(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 100 + (37*i)%5000
	}
	return ids
}
