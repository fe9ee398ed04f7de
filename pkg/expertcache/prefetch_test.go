package expertcache

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

func TestPrefetchWidth(t *testing.T) {
	for _, tc := range []struct {
		want, slots, experts, topK int
		width, inFlight            int
	}{
		{0, 121, 256, 8, DefaultPrefetch, 2 * DefaultPrefetch},
		{8, 121, 256, 8, 8, 16},
		{20, 121, 256, 8, 8, 16}, // at most top_k
		{-1, 121, 256, 8, 0, 0},  // off
		{4, 256, 256, 8, 0, 0},   // every expert has a slot
		{4, 15, 256, 8, 0, 0},    // a guess would evict what the token needs
		{4, 16, 256, 8, 4, 8},
	} {
		w, n := prefetchWidth(tc.want, tc.slots, tc.experts, tc.topK)
		if w != tc.width || n != tc.inFlight {
			t.Errorf("prefetchWidth(%d, %d slots, %d experts, top %d) = %d, %d; want %d, %d",
				tc.want, tc.slots, tc.experts, tc.topK, w, n, tc.width, tc.inFlight)
		}
	}
}

// Whatever is guessed, and whether the guesses land before, during or
// after the visit that needs them, every expert handed over must equal the
// file bytes, and the counters must add up: every byte read is a demand
// miss or a speculative read.
func TestPrefetchServesFileBytes(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	files := expertFiles(t, dir, m)
	x := m.Experts
	for _, mode := range []IOMode{IOBounded, IOBuffered} {
		for _, threads := range []int{1, 4} {
			t.Run(fmt.Sprintf("%v/threads=%d", mode, threads), func(t *testing.T) {
				c := newCache(t, dir, m, Options{Slots: 2 * x.TopK, IOThreads: threads, IO: mode, Prefetch: x.TopK})
				if c.PrefetchWidth() != x.TopK {
					t.Fatalf("PrefetchWidth %d, want %d", c.PrefetchWidth(), x.TopK)
				}
				rng := rand.New(rand.NewPCG(3, uint64(threads)))
				for step := range 200 {
					layer := rng.IntN(len(x.Layers))
					ids := rng.Perm(x.Count)[:x.TopK]
					guess := append(rng.Perm(x.Count)[:x.TopK/2], ids[:x.TopK/2]...)
					c.Prefetch(layer, guess)
					if step%5 == 4 {
						acquireChecked(t, c, files, m, layer, ids)
						continue
					}
					err := c.Visit(layer, ids, func(i int, em model.ExpertMats) error {
						checkMats(t, files, m, layer, ids[i], em)
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				st := c.Stats()
				if st.Prefetched == 0 || st.PrefetchHits == 0 {
					t.Fatalf("stats %+v: want speculative reads, some of them used", st)
				}
				if st.BytesRead != st.Misses*x.Stride+st.PrefetchBytes || st.PrefetchBytes > st.Prefetched*x.Stride {
					t.Fatalf("stats %+v: bytes read must be misses × stride + speculative bytes, those at most prefetched × stride", st)
				}
			})
		}
	}
}

// A speculative read that fails is never served: the visit reads the
// expert again and reports that read's error.
func TestFailedPrefetchIsReadAgain(t *testing.T) {
	forEachTruncatedLayer(t, Options{Slots: 8, Prefetch: 2}, func(t *testing.T, c *Cache, tl truncatedLayer) {
		tl.cut(t)
		c.Prefetch(0, []int{12, 3})
		err := c.Visit(0, []int{3, 12}, func(int, model.ExpertMats) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "expert 12") {
			t.Fatalf("visit after a failed guess at a truncated file: %v, want an error naming expert 12", err)
		}
		tl.restore(t)
		c.Prefetch(0, []int{13, 12})
		ids := []int{12, 13}
		err = c.Visit(0, ids, func(i int, em model.ExpertMats) error {
			checkMats(t, tl.files, tl.m, 0, ids[i], em)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A reader skips a speculative read whose visit has begun and passed, and
// leaves its buffer alone.
func TestReaderSkipsStaleSpeculativeReads(t *testing.T) {
	demand, spec := make(chan readReq), make(chan readReq, 2)
	done := make(chan readDone, 2)
	var visits atomic.Uint64
	visits.Store(5)
	buf := []byte{7}
	spec <- readReq{fd: -1, buf: buf, layer: 1, slot: 3, spec: true, visit: 4, done: done}
	spec <- readReq{fd: -1, buf: buf, layer: 1, slot: 4, spec: true, visit: 5, done: done}
	close(spec)
	reader(demand, spec, &visits)
	stale, current := <-done, <-done
	if !stale.canceled || stale.err != nil || stale.slot != 3 || buf[0] != 7 {
		t.Fatalf("stale read: %+v, buffer %v; want it skipped, the buffer untouched", stale, buf)
	}
	if current.canceled || current.err == nil {
		t.Fatalf("read for the current visit: %+v; want it attempted (and failing on fd -1)", current)
	}
}

// Closing with speculative reads in flight waits for them (run with -race).
func TestCloseWithPrefetchInFlight(t *testing.T) {
	dir, m := tinyInstall(t, 8)
	x := m.Experts
	c, err := New(dir, m, Options{Slots: 2 * x.TopK, IOThreads: 2, Prefetch: x.TopK})
	if err != nil {
		t.Fatal(err)
	}
	c.Prefetch(0, []int{0, 1, 2, 3})
	c.Prefetch(1, []int{4, 5, 6, 7})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Prefetch(2, []int{0}) // after Close: nothing happens
}
