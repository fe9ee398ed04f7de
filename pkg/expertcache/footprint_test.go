package expertcache

import (
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// An install whose experts are 8× the budget, read completely in a random
// order: bounded reads must leave the page cache (almost) empty, buffered
// reads fill it. Residency comes from mincore over the files.
func TestFootprintStaysWithinBudget(t *testing.T) {
	dir := t.TempDir()
	const layers, experts, topK = 4, 64, 4
	m := syntheticInstall(t, dir, layers, experts, topK, 128, 256) // 56 KiB stride
	x := m.Experts
	files := expertFiles(t, dir, m)
	total := int64(layers) * int64(experts) * x.Stride
	budget := total / 8

	dropFromPageCache(t, dir, m)
	if before := cachedBytes(t, dir, m); before > total/16 {
		t.Skipf("FADV_DONTNEED left %d of %d bytes cached; residency cannot be measured here", before, total)
	}
	hwmBefore, _ := PeakRSS()

	bounded := readEverything(t, dir, m, files, Options{Budget: budget, IOThreads: 4})
	afterBounded := cachedBytes(t, dir, m)
	hwmAfter, _ := PeakRSS()
	t.Logf("bounded (%s): %d of %d expert bytes in the page cache after reading all; slot memory %s; VmHWM grew %s (budget %s)",
		bounded.Mode, afterBounded, total, FormatSize(bounded.BudgetBytes), FormatSize(hwmAfter-hwmBefore), FormatSize(budget))
	if bounded.BudgetBytes > budget {
		t.Fatalf("slots take %d bytes, over the %d-byte budget", bounded.BudgetBytes, budget)
	}
	if bounded.BytesRead < total {
		t.Fatalf("read %d bytes, want at least the %d of every expert", bounded.BytesRead, total)
	}
	// The mode probe reads one block per cache; allow a little more.
	const slack = 64 << 10
	if afterBounded > slack {
		t.Errorf("bounded reads left %d of %d bytes in the page cache (mode %s)", afterBounded, total, bounded.Mode)
	}
	for _, mode := range []IOMode{IODontCache, IODirect, IODropBehind} {
		dropFromPageCache(t, dir, m)
		st, ok := tryReadEverything(t, dir, m, files, Options{Budget: budget, IO: mode})
		if !ok {
			continue
		}
		cached := cachedBytes(t, dir, m)
		t.Logf("%v: %d of %d expert bytes in the page cache", st.Mode, cached, total)
		if cached > slack {
			t.Errorf("%v reads left %d of %d bytes in the page cache", mode, cached, total)
		}
	}

	dropFromPageCache(t, dir, m)
	buffered := readEverything(t, dir, m, files, Options{Budget: budget, IO: IOBuffered})
	afterBuffered := cachedBytes(t, dir, m)
	t.Logf("buffered (%s): %d of %d expert bytes in the page cache", buffered.Mode, afterBuffered, total)
	if afterBuffered < total/2 {
		t.Logf("buffered reads cached only %d of %d bytes; the page cache is under pressure, not asserting", afterBuffered, total)
	}
}

// tryReadEverything is readEverything for a forced mode that may not
// work on this file system.
func tryReadEverything(t *testing.T, dir string, m *packexperts.Manifest, files [][]byte, opt Options) (Stats, bool) {
	t.Helper()
	c, err := New(dir, m, opt)
	if err != nil {
		t.Logf("%v: %v", opt.IO, err)
		return Stats{}, false
	}
	c.Close()
	return readEverything(t, dir, m, files, opt), true
}

func readEverything(t *testing.T, dir string, m *packexperts.Manifest, files [][]byte, opt Options) Stats {
	t.Helper()
	c := newCache(t, dir, m, opt)
	x := m.Experts
	rng := rand.New(rand.NewPCG(5, 5))
	type pair struct{ layer, e int }
	var all []pair
	for l := range x.Layers {
		for e := range x.Count {
			all = append(all, pair{l, e})
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, p := range all {
		err := c.Visit(p.layer, []int{p.e}, func(_ int, mats model.ExpertMats) error {
			checkMats(t, files, m, p.layer, p.e, mats)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return c.Stats()
}
