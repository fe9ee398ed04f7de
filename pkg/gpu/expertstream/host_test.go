package expertstream

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

// install converts a fixture snapshot once per test run (fixinstall), as
// pkg/gpu's tests do: $NVMAI_GPU_FIXTURES, else ../shared/fixtures/dev.
func install(t testing.TB, snapshot string, bits int) string {
	t.Helper()
	dir := ""
	if d := os.Getenv("NVMAI_GPU_FIXTURES"); d != "" {
		dir = filepath.Join(d, snapshot)
		if _, err := os.Stat(dir); err != nil {
			t.Skipf("fixture %s absent: %v", dir, err)
		}
	} else {
		dir = testfix.Shared(t, "dev/"+snapshot)
	}
	return fixinstall.Install(t, dir, bits)
}

// PlanRAMTier keeps device-planned streaming while page-locked RAM holds
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
			got, err := PlanRAMTier(RAMTierInput{Budget: tc.budget, Avail: tc.avail, Force: tc.force, Experts: ex, Pinned: all})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--ram-budget") {
					t.Fatalf("err %v, want one containing %q and saying what to raise", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.HostPlanned != tc.host || got.Slots != tc.slots || !strings.Contains(got.Why, tc.why) {
				t.Fatalf("got %+v, want host-planned %v with %d slots sized by %q", got, tc.host, tc.slots, tc.why)
			}
		})
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
	r := NewSlotRef(16, 6)
	r.Resolve([]int32{1, 2, 3})
	slots := r.Resolve([]int32{1, 4, 5}) // 4 and 5 miss
	fill := slices.Clone(r.Fill)
	r.Forget(fill)
	for _, f := range fill {
		if r.SlotOf[f[1]] != -1 || r.ExpertOf[f[0]] != -1 {
			t.Fatalf("expert %d still in slot %d after its copy failed", f[1], f[0])
		}
	}
	if r.SlotOf[1] != slots[0] {
		t.Fatalf("the hit on expert 1 lost its slot")
	}
	hits, misses := r.Hits, r.Misses
	r.Resolve([]int32{4, 5, 1})
	if r.Misses-misses != 2 || r.Hits-hits != 1 {
		t.Fatalf("after forgetting: %d misses %d hits, want 2 and 1", r.Misses-misses, r.Hits-hits)
	}
	// Forget leaves a slot another expert has since taken.
	r.Forget([][2]int32{{r.SlotOf[4], 9}})
	if r.SlotOf[4] < 0 {
		t.Fatal("forget emptied a slot holding another expert")
	}
}

// The bench's tier figures are differences per token.
func TestTierStats(t *testing.T) {
	before := StreamStats{DecodeHits: 10, DecodeMisses: 10, DecodeBytes: 100, HostTierStats: HostTierStats{RAMHits: 5, RAMMisses: 5, DiskBytes: 50, AcquireSeconds: 1, SyncSeconds: 2}}
	after := StreamStats{DecodeHits: 40, DecodeMisses: 20, DecodeBytes: 1100, HostTierStats: HostTierStats{RAMHits: 11, RAMMisses: 9, DiskBytes: 450, AcquireSeconds: 1.5, SyncSeconds: 2.25}}
	got := TierStatsOf(before, after, 10)
	want := TierStats{Tokens: 10, VRAMHitRate: 0.75, RAMHitRate: 0.6, PCIeBytesPerToken: 100, DiskBytesPerToken: 40, DiskWaitMsPerToken: 50, SyncMsPerToken: 25}
	if *got != want {
		t.Fatalf("got %+v, want %+v", *got, want)
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

// hostPlanFixture is a host-planned tier over the tiny-moe install's
// expert files with fake device memory: S VRAM slots and ramSlots RAM
// slots a layer, each layer's pool and decode slots, one staging buffer
// and the route's picks (sel).
type hostPlanFixture struct {
	h       *HostTier
	dev     *fakeDevice
	sel     cuda.DevicePtr
	staging cuda.DevicePtr
	files   [][]byte // each layer's expert file
	sls     []fakeLayer
	E, k    int
	T       int // the most tokens a pass carries
}

// fakeLayer is a streamed layer's device buffers and host-side state.
type fakeLayer struct {
	pool, slotSel cuda.DevicePtr
	hl            *HostLayer
}

func (fx *hostPlanFixture) decode(sl fakeLayer) error {
	return fx.h.Decode(fx.dev, sl.hl, fx.sel, sl.pool, sl.slotSel)
}

func (fx *hostPlanFixture) stage(sl fakeLayer, T int) error {
	return fx.h.Stage(fx.dev, sl.hl, fx.sel, sl.pool, fx.staging, T)
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
	fx.h = &HostTier{engine: "gpu", E: x.Count, K: x.TopK, Stride: x.Stride, cache: cache, layers: map[int]*HostLayer{}, slotBuf: make([]byte, 4*x.TopK*L)}
	fx.staging = fx.dev.alloc(int64(x.Count) * x.Stride)
	fx.sel = fx.dev.alloc(int64(4 * fx.T * x.TopK))
	for i, l := range x.Layers {
		b, err := os.ReadFile(filepath.Join(dir, l.File))
		if err != nil {
			t.Fatal(err)
		}
		fx.files = append(fx.files, b)
		sl := fakeLayer{pool: fx.dev.alloc(int64(S) * x.Stride), slotSel: fx.dev.alloc(int64(4 * x.TopK))}
		sl.hl = fx.h.AddLayer(i, i, S)
		fx.sls = append(fx.sls, sl)
	}
	return fx
}

// route writes a pass's picks where the route kernel would.
func (fx *hostPlanFixture) route(picks []int32) {
	copy(fx.dev.at(fx.sel, int64(4*len(picks))), cuda.Bytes(picks))
}

func (fx *hostPlanFixture) record(layer, e int) []byte {
	s := fx.h.Stride
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
			refs := make([]*SlotRef, L)
			for i := range refs {
				refs[i] = NewSlotRef(E, c.S)
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
						before := slices.Clone(sl.hl.Ref.Words(k))
						if err := fx.stage(sl, T); err != nil {
							t.Fatal(err)
						}
						fx.dev.Sync()
						need, _ := neededExperts(picks, E)
						prefillNeeded += int64(len(need))
						for _, e := range need {
							if !bytes.Equal(fx.dev.at(fx.staging+cuda.DevicePtr(int64(e)*fx.h.Stride), fx.h.Stride), fx.record(i, e)) {
								t.Fatalf("step %d layer %d: staged expert %d differs from its record", step, i, e)
							}
						}
						if !slices.Equal(before, sl.hl.Ref.Words(k)) {
							t.Fatalf("step %d layer %d: prefill changed the slot table", step, i)
						}
					}
					continue
				}
				for i, sl := range fx.sls {
					picks := pick()
					fx.route(picks)
					if err := fx.decode(sl); err != nil {
						t.Fatal(err)
					}
					want := refs[i].Resolve(picks)
					fx.dev.Sync() // the layer's products run after its copies
					got := unsafeInt32s(bytes.Clone(fx.dev.at(sl.slotSel, int64(4*k))))
					if !slices.Equal(got, want) {
						t.Fatalf("step %d layer %d: slots %v, the reference LRU's %v", step, i, got, want)
					}
					for j, e := range picks {
						if !bytes.Equal(fx.dev.at(sl.pool+cuda.DevicePtr(int64(got[j])*fx.h.Stride), fx.h.Stride), fx.record(i, int(e))) {
							t.Fatalf("step %d layer %d: slot %d holds the wrong bytes for expert %d", step, i, got[j], e)
						}
					}
					decodePicks += int64(k)
				}
			}
			s := fx.h.StreamStats(L)
			if s.DecodeHits+s.DecodeMisses != decodePicks || s.PrefillFromVRAM+s.PrefillFromHost != prefillNeeded ||
				s.RAMHits+s.RAMMisses != s.DecodeMisses+s.PrefillFromHost || s.DiskBytes != s.RAMMisses*fx.h.Stride ||
				s.DecodeBytes != s.DecodeMisses*fx.h.Stride || s.PrefillBytes != s.PrefillFromHost*fx.h.Stride || s.RAMMisses == 0 {
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
	hl := sl.hl
	fx.route([]int32{0, 1, 2, 3})
	err = fx.decode(sl)
	if err == nil || !strings.Contains(err.Error(), victim) || !strings.Contains(err.Error(), "layer 0") {
		t.Fatalf("reading past the truncated file: %v, want an error naming %s and the layer", err, victim)
	}
	for _, e := range []int{0, 1, 2, 3} {
		if hl.Ref.SlotOf[e] >= 0 {
			t.Errorf("expert %d keeps slot %d after its copy failed", e, hl.Ref.SlotOf[e])
		}
	}
}
