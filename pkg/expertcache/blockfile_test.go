package expertcache

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmai/nvmai/pkg/limits"
)

// TestBlockFile: every mode reads the same bytes; a bounded mode reads
// whole aligned pages (Span) and refuses an unaligned direct read; a read
// past the end is a short read.
func TestBlockFile(t *testing.T) {
	const a = limits.DirectIOAlign
	path := filepath.Join(t.TempDir(), "table.bin")
	data := make([]byte, 5*a)
	for i := range data {
		data[i] = byte(i*7 + i/a)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBlockFile(filepath.Join(t.TempDir(), "missing"), IOBounded); err == nil {
		t.Fatal("a missing file opened")
	}
	for _, mode := range []IOMode{IOBounded, IOBuffered, IODirect, IODontCache, IODropBehind} {
		t.Run(mode.String(), func(t *testing.T) {
			f, err := OpenBlockFile(path, mode)
			if err != nil {
				if mode != IOBounded && mode != IOBuffered {
					t.Skipf("%v reads do not work here: %v", mode, err)
				}
				t.Fatal(err)
			}
			defer f.Close()
			if f.Mode() == IOBounded || (mode != IOBounded && f.Mode() != mode) {
				t.Fatalf("opened in mode %v for %v", f.Mode(), mode)
			}
			for _, tc := range []struct{ off, n int64 }{{0, 8}, {a - 8, 8}, {a + 320, 320}, {3*a - 1, 2}, {4 * a, a}} {
				start, length := f.Span(tc.off, tc.n)
				if f.Mode() == IOBuffered {
					if start != tc.off || length != tc.n {
						t.Fatalf("buffered span of %d at %d is [%d, +%d)", tc.n, tc.off, start, length)
					}
				} else if start%a != 0 || length%a != 0 || start > tc.off || start+length < tc.off+tc.n || length > tc.n+2*a {
					t.Fatalf("bounded span of %d at %d is [%d, +%d)", tc.n, tc.off, start, length)
				}
				buf := AlignedBuffer(int(length))
				if !Aligned(buf[:(length+a-1)/a*a], 0) {
					t.Fatal("AlignedBuffer is not aligned")
				}
				if err := f.ReadBlock(buf[:length], start); err != nil {
					t.Fatalf("%d bytes at %d: %v", length, start, err)
				}
				if got := buf[tc.off-start : tc.off-start+tc.n]; !bytes.Equal(got, data[tc.off:tc.off+tc.n]) {
					t.Fatalf("%d bytes at %d differ from the file's", tc.n, tc.off)
				}
			}
			buf := AlignedBuffer(2 * a)
			if err := f.ReadBlock(buf, 4*a); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("a read past the end: %v, want a short read", err)
			}
			if f.Mode() == IODirect {
				if err := f.ReadBlock(buf[1:a+1], 0); err == nil {
					t.Error("an unaligned direct read was attempted")
				}
			}
		})
	}
}

// BenchmarkNgramStepReads: one Qwen3.8 decode step's n-gram reads as the
// runtime does them, 16 random aligned 4 KiB pages on 4 readers, from the
// file NVMAI_BENCH_FILE names (a file of real data, e.g. an expert layer:
// the synthetic installs' table is a hole, whose reads cost no device I/O).
// One op is one step; NVMAI_BOUNDED_IO=0 measures page-cache reads.
//
//	NVMAI_BENCH_FILE=DIR/experts/layer-003.bin go test -run - -bench NgramStepReads ./pkg/expertcache
func BenchmarkNgramStepReads(b *testing.B) {
	path := os.Getenv("NVMAI_BENCH_FILE")
	if path == "" {
		b.Skip("set NVMAI_BENCH_FILE to a large file of real data")
	}
	mode, err := BoundedIOFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	f, err := OpenBlockFile(path, mode)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const a, rows, readers = limits.DirectIOAlign, 16, 4
	pages := f.Size() / a
	bufs := make([][]byte, readers)
	for i := range bufs {
		bufs[i] = AlignedBuffer(a)
	}
	seed := uint64(0x9e3779b97f4a7c15)
	next := func() int64 {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return int64(seed % uint64(pages))
	}
	offs := make([]int64, rows)
	b.SetBytes(rows * a)
	b.ResetTimer()
	for range b.N {
		for i := range offs {
			offs[i] = next() * a
		}
		done := make(chan error, readers)
		for w := range readers {
			go func() {
				var err error
				for i := w; i < rows && err == nil; i += readers {
					err = f.ReadBlock(bufs[w], offs[i])
				}
				done <- err
			}()
		}
		for range readers {
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
}
