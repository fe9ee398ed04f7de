package expertcache

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

// A visit larger than the slots (a long prefill pass) hands every expert
// over once with its file bytes, reads each missing expert once, and serves
// the resident ones without a read, for any reader count and mode.
func TestRollingVisitReadsEachMissOnce(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	files := expertFiles(t, dir, m)
	x := m.Experts
	for _, mode := range []IOMode{IOBounded, IOBuffered} {
		for _, tc := range []struct{ slots, readers int }{{x.TopK, 1}, {x.TopK + 1, 4}, {x.Count - 1, 8}} {
			t.Run(fmt.Sprintf("%v/slots=%d/readers=%d", mode, tc.slots, tc.readers), func(t *testing.T) {
				c := newCache(t, dir, m, Options{Slots: tc.slots, IOThreads: tc.readers, IO: mode, Prefetch: -1})
				all := make([]int, x.Count)
				for i := range all {
					all[i] = (i * 7) % x.Count // distinct: 7 is prime to the count
				}
				for pass := range 3 {
					before := c.Stats()
					resident := residentCount(c, 1, all)
					calls := make([]int, len(all))
					err := c.VisitGroups(1, all, func(idx []int, mats []model.ExpertMats) error {
						for j, i := range idx {
							calls[i]++
							checkMats(t, files, m, 1, all[i], mats[j])
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					for i, n := range calls {
						if n != 1 {
							t.Fatalf("pass %d: index %d handed over %d times", pass, i, n)
						}
					}
					st := c.Stats()
					if hits, misses := st.Hits-before.Hits, st.Misses-before.Misses; hits != int64(resident) || misses != int64(len(all)-resident) {
						t.Errorf("pass %d: %d hits, %d misses; want the %d resident as hits and each of the other %d read once", pass, hits, misses, resident, len(all)-resident)
					}
					if st.BytesRead != st.Misses*x.Stride+st.WarmBytes { // warm reads of layer 2
						t.Errorf("pass %d: %d bytes read for %d misses and %d bytes of warm reads", pass, st.BytesRead, st.Misses, st.WarmBytes)
					}
				}
				c.drainSpec() // warm reads of layer 2 may still be in flight
				assertUnpinned(t, c)
			})
		}
	}
}

// An error from fn or from a read stops a rolling visit, comes back, and
// leaves no slot pinned.
func TestRollingVisitErrors(t *testing.T) {
	forEachTruncatedLayer(t, Options{Slots: 3, IOThreads: 2}, func(t *testing.T, c *Cache, tl truncatedLayer) {
		all := make([]int, tl.m.Experts.Count)
		for i := range all {
			all[i] = i
		}
		stop := errors.New("stop")
		n := 0
		err := c.Visit(0, all, func(int, model.ExpertMats) error {
			if n++; n == 5 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 5 {
			t.Fatalf("fn error: got %v after %d calls, want stop after 5", err, n)
		}
		assertUnpinned(t, c)
		tl.cut(t) // experts 8 and up can no longer be read
		err = c.Visit(0, all, func(int, model.ExpertMats) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "expert") {
			t.Fatalf("visit past a truncated file: %v, want a read error", err)
		}
		assertUnpinned(t, c)
		tl.restore(t)
		if err := c.Visit(0, all, func(int, model.ExpertMats) error { return nil }); err != nil {
			t.Fatalf("after restoring the file: %v", err)
		}
	})
}

func residentCount(c *Cache, layer int, ids []int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range ids {
		if c.layers[layer].res.where[e] >= 0 {
			n++
		}
	}
	return n
}

func assertUnpinned(t *testing.T, c *Cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for l, lc := range c.layers {
		if free := lc.res.free(); free != c.slots {
			t.Fatalf("layer %d: %d of %d slots unpinned after the visit", l, free, c.slots)
		}
	}
}
