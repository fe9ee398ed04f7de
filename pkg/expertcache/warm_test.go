package expertcache

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// visitChecked visits ids of layer and checks that every index is handed
// over exactly once with the file's bytes.
func visitChecked(t *testing.T, c *Cache, files [][]byte, m *packexperts.Manifest, layer int, ids []int) error {
	t.Helper()
	calls := make([]int, len(ids))
	err := c.VisitGroups(layer, ids, func(idx []int, mats []model.ExpertMats) error {
		for j, i := range idx {
			calls[i]++
			checkMats(t, files, m, layer, ids[i], mats[j])
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, n := range calls {
		if n != 1 {
			t.Fatalf("layer %d: index %d handed over %d times", layer, i, n)
		}
	}
	return nil
}

// Warm reads move bytes, never what a visit hands over: layers visited in
// order and out of order, wide (warming the next layer) and narrow (leaving
// guesses unused), with Prefetch's guesses in flight as a visit starts
// (rolling or not), for any slot count, reader count and read mode, every
// expert equals the file's bytes and the counters add up. With warm reads
// off none are issued.
func TestWarmReadsServeFileBytes(t *testing.T) {
	dir := t.TempDir()
	m := syntheticInstall(t, dir, 4, 16, 2, 128, 64)
	files := expertFiles(t, dir, m)
	x := m.Experts
	for _, mode := range []IOMode{IOBounded, IOBuffered} {
		for _, tc := range []struct{ slots, readers int }{{4, 1}, {9, 3}, {15, 8}, {16, 2}} {
			for _, noWarm := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/slots=%d/readers=%d/nowarm=%v", mode, tc.slots, tc.readers, noWarm), func(t *testing.T) {
					c := newCache(t, dir, m, Options{Slots: tc.slots, IOThreads: tc.readers, IO: mode, NoWarm: noWarm})
					rng := rand.New(rand.NewPCG(uint64(tc.slots), uint64(tc.readers)))
					all := rng.Perm(x.Count)
					for pass := range 3 { // passes in order: the first warms every layer after 0
						for l := range x.Layers {
							if err := visitChecked(t, c, files, m, l, all); err != nil {
								t.Fatal(err)
							}
						}
						if pass == 0 && !noWarm && tc.slots > x.TopK+1 && c.Stats().WarmHits == 0 {
							t.Fatalf("cold pass: stats %+v, want warm reads asked for", c.Stats())
						}
					}
					for range 60 { // then any layer, any width, with decode's guesses in flight too
						l := rng.IntN(len(x.Layers))
						ids := rng.Perm(x.Count)[:[]int{x.Count, x.Count * 3 / 4, x.Count / 2, x.TopK}[rng.IntN(4)]]
						if rng.IntN(2) == 0 {
							c.Prefetch(l, rng.Perm(x.Count)[:x.TopK])
						}
						if err := visitChecked(t, c, files, m, l, ids); err != nil {
							t.Fatal(err)
						}
					}
					c.drainSpec()
					st := c.Stats()
					if st.BytesRead != st.Misses*x.Stride+st.WarmBytes+st.PrefetchBytes || st.WarmBytes > st.Warmed*x.Stride || st.WarmHits > st.Warmed {
						t.Fatalf("stats %+v: bytes read must be misses × stride + speculative bytes; warm bytes at most warmed × stride; hits at most warmed", st)
					}
					if noWarm && st.Warmed != 0 {
						t.Fatalf("warm reads off, yet %d issued", st.Warmed)
					}
					assertUnpinned(t, c)
				})
			}
		}
	}
}

// With warm reads on, a cold cache's first wide visits read the same bytes
// overall as with them off when every guess is asked for: each expert is
// read once. BeginPass warms the first layer too, and only for a pass long
// enough that most experts will be asked for.
func TestWarmReadsCostNoBytesWhenAskedFor(t *testing.T) {
	dir := t.TempDir()
	m := syntheticInstall(t, dir, 3, 16, 2, 128, 64)
	x := m.Experts
	all := make([]int, x.Count)
	for i := range all {
		all[i] = i
	}
	for _, tc := range []struct {
		noWarm      bool
		pass        int   // tokens told to BeginPass; 0: not called
		warmedLayer []int // layers warmed
	}{
		{false, 0, []int{1, 2}},
		{false, 64, []int{0, 1, 2}}, // 1 − e^(−64·2/16): every expert asked for
		{false, 5, []int{1, 2}},     // 1 − e^(−5·2/16) = 46%: no guess for layer 0
		{true, 64, nil},
	} {
		c := newCache(t, dir, m, Options{Slots: 10, IOThreads: 2, NoWarm: tc.noWarm})
		if tc.pass > 0 {
			c.BeginPass(tc.pass)
		}
		for l := range x.Layers {
			if err := c.Visit(l, all, func(int, model.ExpertMats) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		c.drainSpec()
		st := c.Stats()
		if want := int64(len(x.Layers)*x.Count) * x.Stride; st.BytesRead != want || st.WarmHits != st.Warmed {
			t.Fatalf("%+v: stats %+v; want %d bytes (each expert once), every warm read asked for", tc, st, want)
		}
		if want := int64(len(tc.warmedLayer) * (10 - x.TopK)); st.Warmed != want {
			t.Fatalf("%+v: %d warm reads, want %d (layers %v, their empty slots less top_k)", tc, st.Warmed, want, tc.warmedLayer)
		}
	}
}

// A warm read that fails is never served: the visit reads the expert again
// on demand and reports that read's error; nothing stays pinned, and once
// the file is whole again the experts are its bytes.
func TestFailedWarmReadIsReadAgain(t *testing.T) {
	dir := t.TempDir()
	m := syntheticInstall(t, dir, 2, 16, 2, 128, 64)
	files := expertFiles(t, dir, m)
	x := m.Experts
	path := filepath.Join(dir, x.Layers[1].File)
	all := make([]int, x.Count)
	for i := range all {
		all[i] = i
	}
	for _, mode := range []IOMode{IOBounded, IOBuffered} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newCache(t, dir, m, Options{Slots: 12, IOThreads: 2, IO: mode})
			if err := os.Truncate(path, 8*x.Stride); err != nil { // layer 1's experts 8 and up
				t.Fatal(err)
			}
			if err := visitChecked(t, c, files, m, 0, all); err != nil { // warms layer 1's 0..9
				t.Fatal(err)
			}
			err := c.Visit(1, all, func(int, model.ExpertMats) error { return nil })
			if err == nil || !strings.Contains(err.Error(), "layer 1 expert") {
				t.Fatalf("visit past a truncated file after warm reads: %v, want a read error", err)
			}
			c.drainSpec()
			assertUnpinned(t, c)
			if err := os.WriteFile(path, files[1], 0o644); err != nil {
				t.Fatal(err)
			}
			for l := range x.Layers {
				if err := visitChecked(t, c, files, m, l, all); err != nil {
					t.Fatalf("after restoring the file: %v", err)
				}
			}
			c.drainSpec()
			assertUnpinned(t, c)
		})
	}
}
