package expertcache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// AcquireRecords hands over each expert's whole record, byte for byte the
// file's at e × stride, lying inside its layer's slab (Slabs), and unchanged
// while held even when later acquisitions of the layer thrash the other
// slots; counted as Acquire counts.
func TestAcquireRecordsAreFileRecords(t *testing.T) {
	for _, bits := range []int{4, 8} {
		dir, m := tinyInstall(t, bits)
		files := expertFiles(t, dir, m)
		x := m.Experts
		for _, slots := range []int{x.TopK + 1, x.Count} {
			t.Run(fmt.Sprintf("%dbit/slots=%d", bits, slots), func(t *testing.T) {
				c := newCache(t, dir, m, Options{Slots: slots})
				if c.Stride() != x.Stride {
					t.Fatalf("Stride %d, want %d", c.Stride(), x.Stride)
				}
				slabs := c.Slabs()
				if len(slabs) != len(x.Layers) {
					t.Fatalf("%d slabs for %d layers", len(slabs), len(x.Layers))
				}
				for layer := range x.Layers {
					held := []int{1, 0}
					recs, release, err := c.AcquireRecords(layer, held)
					if err != nil {
						t.Fatal(err)
					}
					copies := make([][]byte, len(recs))
					for i, r := range recs {
						copies[i] = bytes.Clone(r)
					}
					for e := 2; e < x.Count; e++ { // one free slot at top_k+1: every one of these evicts
						r, rel, err := c.AcquireRecords(layer, []int{e})
						if err != nil {
							t.Fatal(err)
						}
						checkRecord(t, files, layer, e, x.Stride, r[0], slabs[layer])
						rel()
					}
					for i, e := range held {
						checkRecord(t, files, layer, e, x.Stride, recs[i], slabs[layer])
						if !bytes.Equal(recs[i], copies[i]) {
							t.Fatalf("layer %d expert %d: its record changed while held", layer, e)
						}
					}
					release()
				}
				if st := c.Stats(); st.Hits+st.Misses != int64(len(x.Layers)*x.Count) || st.BytesRead != st.Misses*x.Stride {
					t.Errorf("stats %+v: want %d requests and BytesRead = misses × stride", st, len(x.Layers)*x.Count)
				}
			})
		}
	}
}

func checkRecord(t *testing.T, files [][]byte, layer, e int, stride int64, rec, slab []byte) {
	t.Helper()
	if !bytes.Equal(rec, files[layer][int64(e)*stride:int64(e+1)*stride]) {
		t.Fatalf("layer %d expert %d: record differs from the file at offset %d", layer, e, int64(e)*stride)
	}
	base, p := uintptr(unsafe.Pointer(unsafe.SliceData(slab))), uintptr(unsafe.Pointer(unsafe.SliceData(rec)))
	if p < base || p+uintptr(len(rec)) > base+uintptr(len(slab)) || (p-base)%uintptr(stride) != 0 {
		t.Fatalf("layer %d expert %d: record is not a slot of the layer's slab", layer, e)
	}
}

// A truncated layer file fails New, and one that shrinks under a running
// cache fails AcquireRecords, both naming the file.
func TestAcquireRecordsNamesDamagedFile(t *testing.T) {
	dir, m := tinyInstall(t, 4)
	bad := t.TempDir()
	// A private copy of the expert files, so the shared install stays whole.
	x := *m.Experts
	x.Layers = append(x.Layers[:0:0], m.Experts.Layers...)
	for _, l := range x.Layers {
		b, err := os.ReadFile(filepath.Join(dir, l.File))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(bad, l.File)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mm := *m
	mm.Experts = &x
	victim := filepath.Join(bad, x.Layers[0].File)
	c, err := New(bad, &mm, Options{Slots: x.TopK, IO: IOBuffered})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := os.Truncate(victim, x.Stride); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.AcquireRecords(0, []int{x.Count - 1}); err == nil || !strings.Contains(err.Error(), victim) {
		t.Fatalf("reading past the end of a truncated file: %v, want an error naming %s", err, victim)
	}
	if _, err := New(bad, &mm, Options{Slots: x.TopK}); err == nil || !strings.Contains(err.Error(), victim) {
		t.Fatalf("New on a truncated file: %v, want an error naming %s", err, victim)
	}
}
