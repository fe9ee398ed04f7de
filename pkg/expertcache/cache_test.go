package expertcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

var allModes = []IOMode{IOBounded, IOBuffered, IODontCache, IODirect, IODropBehind}

// newCache opens a cache or skips when a forced read mode does not work on
// this machine's file system (the mode is then reported by the test log).
func newCache(t testing.TB, dir string, m *packexperts.Manifest, opt Options) *Cache {
	t.Helper()
	c, err := New(dir, m, opt)
	if err != nil && opt.IO != IOBounded && opt.IO != IOBuffered && strings.Contains(err.Error(), "do not work here") {
		t.Skipf("%v reads unsupported here: %v", opt.IO, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// Every (layer, expert) served through Acquire and Visit must equal the
// file bytes at e × stride, whatever the read mode, thread count, and
// whether the cache thrashes (top_k+1 slots) or holds everything.
func TestServedBytesEqualFileBytes(t *testing.T) {
	for _, bits := range []int{4, 8} {
		dir, m := tinyInstall(t, bits)
		files := expertFiles(t, dir, m)
		x := m.Experts
		for _, mode := range allModes {
			for _, threads := range []int{1, 4} {
				for _, slots := range []int{x.TopK + 1, x.Count} {
					name := fmt.Sprintf("%dbit/%v/threads=%d/slots=%d", bits, mode, threads, slots)
					t.Run(name, func(t *testing.T) {
						c := newCache(t, dir, m, Options{Slots: slots, IOThreads: threads, IO: mode})
						readAllTwice(t, c, files, m)
						st := c.Stats()
						if st.Misses == 0 || st.BytesRead != st.Misses*x.Stride {
							t.Fatalf("stats %+v: want misses > 0 and BytesRead = misses × stride", st)
						}
						if slots == x.Count && st.Misses != int64(len(x.Layers)*x.Count) {
							t.Errorf("a cache holding every expert read %d experts, want each of %d once", st.Misses, len(x.Layers)*x.Count)
						}
					})
				}
			}
		}
	}
}

// readAllTwice requests every expert of every layer in a shuffled order,
// top_k at a time, once through Acquire and once through Visit.
func readAllTwice(t *testing.T, c *Cache, files [][]byte, m *packexperts.Manifest) {
	x := m.Experts
	rng := rand.New(rand.NewPCG(7, uint64(c.slots)))
	for layer := range x.Layers {
		order := rng.Perm(x.Count)
		for start := 0; start < len(order); start += x.TopK {
			acquireChecked(t, c, files, m, layer, order[start:min(start+x.TopK, len(order))])
		}
		for start := 0; start < len(order); start += x.TopK {
			ids := order[start:min(start+x.TopK, len(order))]
			seen := map[int]bool{}
			err := c.Visit(layer, ids, func(i int, mats model.ExpertMats) error {
				if seen[i] {
					t.Fatalf("Visit called fn twice for index %d", i)
				}
				seen[i] = true
				checkMats(t, files, m, layer, ids[i], mats)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != len(ids) {
				t.Fatalf("Visit called fn for %d of %d ids", len(seen), len(ids))
			}
		}
	}
}

// acquireChecked acquires ids of layer, checks each against the file bytes
// and releases them.
func acquireChecked(t *testing.T, c *Cache, files [][]byte, m *packexperts.Manifest, layer int, ids []int) {
	t.Helper()
	mats, release, err := c.Acquire(layer, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ids {
		checkMats(t, files, m, layer, e, mats[i])
	}
	release()
}

// A pinned slot must survive any number of later misses. The held experts
// are the oldest and least used, so a victim choice that ignored pins would
// pick them first under every policy.
func TestPinnedSlotsAreNeverEvicted(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	files := expertFiles(t, dir, m)
	x := m.Experts
	for _, policy := range []Policy{PolicyLRU, PolicyLFU, PolicyAgingLFU, PolicyLRFU, PolicyAdaptive} {
		t.Run(policy.String(), func(t *testing.T) {
			c := newCache(t, dir, m, Options{Slots: x.TopK + 1, Policy: policy})
			const layer = 2
			held := []int{0, 1, 2, 3}[:x.TopK]
			heldMats, releaseHeld, err := c.Acquire(layer, held)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				for e := x.TopK; e < x.Count; e++ {
					mats, release, err := c.Acquire(layer, []int{e})
					if err != nil {
						t.Fatal(err)
					}
					checkMats(t, files, m, layer, e, mats[0])
					release()
					if err := c.Visit(layer, []int{(e+round)%(x.Count-x.TopK) + x.TopK}, func(int, model.ExpertMats) error { return nil }); err != nil {
						t.Fatal(err)
					}
					for i, h := range held {
						checkMats(t, files, m, layer, h, heldMats[i])
					}
				}
			}
			_, _, err = c.Acquire(layer, []int{x.Count - 1, x.Count - 2})
			if err == nil || !strings.Contains(err.Error(), "unpinned") {
				t.Fatalf("two misses with one unpinned slot: err %v, want a no-room error", err)
			}
			// Visit copes by itself: one slot at a time.
			visited := 0
			if err := c.Visit(layer, []int{x.Count - 1, x.Count - 2, x.Count - 3}, func(int, model.ExpertMats) error { visited++; return nil }); err != nil || visited != 3 {
				t.Fatalf("Visit with one free slot: %d calls, err %v", visited, err)
			}
			releaseHeld()
			releaseHeld() // a second release is a no-op, not a double unpin
			mats, release, err := c.Acquire(layer, []int{11, 12, 13, 14, 15}[:x.TopK+1])
			if err != nil {
				t.Fatalf("after release every slot is free again: %v", err)
			}
			checkMats(t, files, m, layer, 11, mats[0])
			release()
		})
	}
}

func TestAcquireAndVisitErrors(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	x := m.Experts
	c := newCache(t, dir, m, Options{Slots: x.TopK})
	tooMany := make([]int, x.TopK+1)
	for i := range tooMany {
		tooMany[i] = i
	}
	cases := []struct {
		name  string
		layer int
		ids   []int
		want  string
	}{
		{"more than MaxAcquire", 0, tooMany, fmt.Sprintf("holds %d per layer (MaxAcquire)", x.TopK)},
		{"duplicate", 0, []int{3, 3}, "expert 3 requested twice"},
		{"expert out of range", 0, []int{x.Count}, fmt.Sprintf("expert %d out of range", x.Count)},
		{"negative expert", 0, []int{-1}, "expert -1 out of range"},
		{"layer out of range", len(x.Layers), []int{0}, fmt.Sprintf("layer %d has no expert file", len(x.Layers))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.Acquire(tc.layer, tc.ids)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Acquire error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Visit handles more ids than slots by batching, resident ones first.
	all := make([]int, x.Count)
	for i := range all {
		all[i] = x.Count - 1 - i
	}
	calls := make([]int, len(all))
	if err := c.Visit(1, all, func(i int, _ model.ExpertMats) error { calls[i]++; return nil }); err != nil {
		t.Fatal(err)
	}
	for i, n := range calls {
		if n != 1 {
			t.Fatalf("index %d visited %d times", i, n)
		}
	}
	// Re-entering the cache from inside fn is the concurrent use it refuses.
	err := c.Visit(1, []int{0}, func(int, model.ExpertMats) error {
		_, _, err := c.Acquire(1, []int{1})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "one caller at a time") {
		t.Fatalf("nested Acquire: %v", err)
	}
	// fn's error stops the visit and comes back unchanged.
	stop := errors.New("stop")
	n := 0
	err = c.Visit(2, []int{0, 1, 2, 3}[:x.TopK], func(int, model.ExpertMats) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("fn error: got %v after %d calls, want stop after 1", err, n)
	}
	// Every slot is unpinned again after the failed visit.
	if _, release, err := c.Acquire(2, []int{4, 5, 6, 7}[:x.TopK]); err != nil {
		t.Fatalf("slots left pinned after a failed Visit: %v", err)
	} else {
		release()
	}
}

// Visit serves resident experts before any miss, so compute starts at once.
func TestVisitServesHitsFirst(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	files := expertFiles(t, dir, m)
	x := m.Experts
	c := newCache(t, dir, m, Options{Slots: x.Count})
	warm := []int{5, 9}
	if err := c.Visit(0, warm, func(int, model.ExpertMats) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ids := []int{1, 5, 2, 9}
	var order []int
	err := c.Visit(0, ids, func(i int, mats model.ExpertMats) error {
		checkMats(t, files, m, 0, ids[i], mats)
		order = append(order, ids[i])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order[:2], warm) || len(order) != 4 {
		t.Fatalf("visit order %v: want the resident %v first", order, warm)
	}
}

// TestVisitGroupsHandsResidentExpertsOverTogether: the resident experts come
// in one call, each missing one in a call of its own, every index once.
func TestVisitGroupsHandsResidentExpertsOverTogether(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	files := expertFiles(t, dir, m)
	x := m.Experts
	c := newCache(t, dir, m, Options{Slots: x.Count})
	warm := []int{3, 5, 9}
	if err := c.Visit(0, warm, func(int, model.ExpertMats) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ids := []int{1, 3, 5, 2, 9}
	var groups [][]int
	seen := make([]bool, len(ids))
	err := c.VisitGroups(0, ids, func(idx []int, mats []model.ExpertMats) error {
		var group []int
		for j, i := range idx {
			if seen[i] {
				t.Fatalf("index %d handed over twice", i)
			}
			seen[i] = true
			checkMats(t, files, m, 0, ids[i], mats[j])
			group = append(group, ids[i])
		}
		groups = append(groups, group)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 3 || !slices.Equal(groups[0], warm) || len(groups[1]) != 1 || len(groups[2]) != 1 {
		t.Fatalf("groups %v: want the resident %v together, then 1 and 2 one by one", groups, warm)
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("index %d never handed over", i)
		}
	}
}

// truncatedLayer is a one-layer install (16 experts, top 2) whose file a
// test cuts after expert 7 (cut) and puts back (restore); each test runs
// once per read mode.
type truncatedLayer struct {
	m     *packexperts.Manifest
	files [][]byte
	path  string
}

func forEachTruncatedLayer(t *testing.T, opt Options, body func(t *testing.T, c *Cache, tl truncatedLayer)) {
	dir := t.TempDir()
	tl := truncatedLayer{m: syntheticInstall(t, dir, 1, 16, 2, 128, 64)}
	tl.files = expertFiles(t, dir, tl.m)
	tl.path = filepath.Join(dir, tl.m.Experts.Layers[0].File)
	for _, mode := range []IOMode{IOBounded, IOBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			opt.IO = mode
			body(t, newCache(t, dir, tl.m, opt), tl)
		})
	}
}

func (tl truncatedLayer) cut(t *testing.T) {
	if err := os.Truncate(tl.path, 8*tl.m.Experts.Stride); err != nil {
		t.Fatal(err)
	}
}

func (tl truncatedLayer) restore(t *testing.T) {
	if err := os.WriteFile(tl.path, tl.files[0], 0o644); err != nil {
		t.Fatal(err)
	}
}

// A failed read must not leave a slot that claims to hold the expert.
func TestFailedReadForgetsSlot(t *testing.T) {
	forEachTruncatedLayer(t, Options{Slots: 4}, func(t *testing.T, c *Cache, tl truncatedLayer) {
		tl.cut(t)
		_, _, err := c.Acquire(0, []int{3, 12})
		if err == nil || !strings.Contains(err.Error(), "expert 12") || !strings.Contains(err.Error(), fmt.Sprint(12*tl.m.Experts.Stride)) {
			t.Fatalf("read past a truncated file: %v, want an error naming expert 12 and its offset", err)
		}
		tl.restore(t)
		misses := c.Stats().Misses
		mats, release, err := c.Acquire(0, []int{12, 3})
		if err != nil {
			t.Fatal(err)
		}
		checkMats(t, tl.files, tl.m, 0, 12, mats[0])
		checkMats(t, tl.files, tl.m, 0, 3, mats[1])
		release()
		if got := c.Stats().Misses - misses; got != 1 {
			t.Fatalf("after the failure expert 12 must be read again and 3 served from its slot: %d misses, want 1", got)
		}
	})
}

// Stats may be read while the cache works; the reader pool is concurrent.
func TestStatsWhileServing(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	x := m.Experts
	c := newCache(t, dir, m, Options{Slots: x.TopK + 2, IOThreads: 4})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = c.Stats().HitRate()
			}
		}
	})
	trace := uniformTrace(3, 50, len(x.Layers), x.Count, x.TopK)
	for i, ids := range trace {
		if i%2 == 0 {
			_, release, err := c.Acquire(i%len(x.Layers), ids)
			if err != nil {
				t.Fatal(err)
			}
			// Release from another goroutine, as a pipelined caller might.
			var released sync.WaitGroup
			released.Go(release)
			released.Wait()
			continue
		}
		if err := c.Visit(i%len(x.Layers), ids, func(int, model.ExpertMats) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	st := c.Stats()
	if st.Hits+st.Misses != int64(len(trace)*x.TopK) || st.ReadSeconds <= 0 || st.WaitSeconds <= 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("mode %s: hit rate %.3f, %.1f MB/s while reading", st.Mode, st.HitRate(), st.ReadRate()/1e6)
}

// The simulator replays the cache's own placement: on the same trace the
// real cache must count exactly the simulated hits and misses.
func TestSimulatorMatchesCache(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	x := m.Experts
	layers := len(x.Layers)
	trace := zipfTrace(11, 120, layers, x.Count, x.TopK, 1.0)
	for _, policy := range []Policy{PolicyLRU, PolicyLFU, PolicyAgingLFU, PolicyLRFU, PolicyAdaptive} {
		for _, slots := range []int{x.TopK, x.TopK + 3, x.Count / 2} {
			t.Run(fmt.Sprintf("%v/slots=%d", policy, slots), func(t *testing.T) {
				sim, err := SimulateHitRate(trace, layers, slots, policy)
				if err != nil {
					t.Fatal(err)
				}
				c := newCache(t, dir, m, Options{Slots: slots, Policy: policy})
				for i, ids := range trace {
					if i%3 == 0 {
						_, release, err := c.Acquire(i%layers, ids)
						if err != nil {
							t.Fatal(err)
						}
						release()
					} else if err := c.Visit(i%layers, ids, func(int, model.ExpertMats) error { return nil }); err != nil {
						t.Fatal(err)
					}
				}
				st := c.Stats()
				if st.Hits != sim.Hits || st.Misses != sim.Misses {
					t.Fatalf("cache %d hits / %d misses, simulator %d / %d", st.Hits, st.Misses, sim.Hits, sim.Misses)
				}
			})
		}
	}
}

// Each layer's hits and misses are counted apart, and add up to the
// totals taken in the same instant.
func TestStatsByLayerSumToTotals(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	x := m.Experts
	c := newCache(t, dir, m, Options{Slots: x.TopK + 1, IOThreads: 2})
	// Layer 0 is asked for the same experts twice (misses, then hits);
	// layer 1 once (misses only); the other layers never.
	ids := make([]int, x.TopK)
	for i := range ids {
		ids[i] = i
	}
	visit := func(layer int) {
		if err := c.Visit(layer, ids, func(int, model.ExpertMats) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	visit(0)
	visit(0)
	visit(1)
	st, layers := c.StatsByLayer()
	if len(layers) != len(x.Layers) {
		t.Fatalf("%d layers reported, the install has %d", len(layers), len(x.Layers))
	}
	k := int64(x.TopK)
	want := []LayerStats{{Hits: k, Misses: k}, {Misses: k}}
	for i, w := range want {
		if layers[i] != w {
			t.Errorf("layer %d: %+v, want %+v", i, layers[i], w)
		}
	}
	var hits, misses int64
	for _, l := range layers {
		hits, misses = hits+l.Hits, misses+l.Misses
	}
	if hits != st.Hits || misses != st.Misses {
		t.Fatalf("layers sum to %d hits, %d misses; totals %d, %d", hits, misses, st.Hits, st.Misses)
	}
}
