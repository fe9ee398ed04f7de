package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// fixtureNgramRows reads the tiny-qwen38 checkpoint's n-gram table (its
// shards, in shard order) straight from the safetensors files and returns
// the rows of ids, widened from BF16: the oracle the install's table is
// checked against.
func fixtureNgramRows(t *testing.T, layout string, ids []int64) ([]float32, int) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(testfix.Dev(t, layout), "*.safetensors"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no safetensors in %s: %v", layout, err)
	}
	shards := map[int][]byte{}
	dr := 0
	for _, p := range paths {
		f, err := safetensors.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Header().Tensors {
			var i int
			if _, err := fmt.Sscanf(ti.Name, "model.language_model.layers.1.ple.ple_embedding.ngram_embedding.shard_%d.weight", &i); err != nil {
				continue
			}
			if ti.DType != safetensors.BF16 {
				t.Fatalf("%s is %s, the test reads BF16", ti.Name, ti.DType)
			}
			buf := make([]byte, ti.Size())
			if err := f.ReadTensor(ti, buf); err != nil {
				t.Fatal(err)
			}
			shards[i], dr = buf, int(ti.Shape[1])
		}
		f.Close()
	}
	var table []byte
	for i := 0; i < len(shards); i++ {
		table = append(table, shards[i]...)
	}
	out := make([]float32, 0, len(ids)*dr)
	for _, id := range ids {
		row := table[id*int64(2*dr) : (id+1)*int64(2*dr)]
		for j := range dr {
			out = append(out, math.Float32frombits(uint32(binary.LittleEndian.Uint16(row[2*j:]))<<16))
		}
	}
	return out, dr
}

// TestQwen38NgramBoundedMatchesPageCache: the n-gram rows come through the
// expert cache's bounded reader (O_DIRECT on this file system) and through
// plain page-cache reads (NVMAI_BOUNDED_IO=0) equal to the checkpoint's
// rows; a bounded read leaves none of the table in the page cache and
// counts whole pages, a buffered one the rows' bytes; and the logits of
// both are bitwise equal and within 1e-3 of transformers.
func TestQwen38NgramBoundedMatchesPageCache(t *testing.T) {
	layout := qwen38Layouts[0]
	dir := install(t, layout, 16)
	refs := loadRefs(t, "tiny-qwen38.refs.json")
	ids := []int64{0, 5, 1009, 16825, 511, 512, 7, 5, 4095, 9000}
	want, dr := fixtureNgramRows(t, layout, ids)
	var logits [2][]float32
	for k, env := range []string{"1", "0"} {
		t.Run("NVMAI_BOUNDED_IO="+env, func(t *testing.T) {
			t.Setenv(expertcache.BoundedIOEnv, env)
			e, err := Load(dir, Options{Threads: 2, Experts: ExpertOptions{Slots: 4}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			tables := e.model.(*q38Model).tables
			table := filepath.Join(dir, filepath.FromSlash(tables.entries[0].File))
			mode := tables.files[0].(*expertcache.BlockFile).Mode()
			if env == "0" && mode != expertcache.IOBuffered || env == "1" && !mode.Bounded() {
				t.Fatalf("n-gram table read in mode %v with %s=%s", mode, expertcache.BoundedIOEnv, env)
			}
			if mode != e.cache.IOMode() {
				t.Fatalf("n-gram table read in mode %v, the experts in %v", mode, e.cache.IOMode())
			}
			t.Logf("n-gram and expert reads in mode %v", mode)
			dropCached(t, []string{table})
			before := e.NgramStats()
			got := make([]float32, len(ids)*dr)
			if err := tables.Rows(0, ids, got); err != nil {
				t.Fatal(err)
			}
			if i := firstBitDiff(got, want); i >= 0 {
				t.Fatalf("value %d (row %d) differs from the checkpoint's", i, ids[i/dr])
			}
			st := e.NgramStats()
			rowBytes := tables.entries[0].RowBytes
			switch {
			case st.Rows-before.Rows != int64(len(ids)):
				t.Errorf("counted %d rows, want %d", st.Rows-before.Rows, len(ids))
			case mode == expertcache.IOBuffered && st.Bytes-before.Bytes != int64(len(ids)-1)*rowBytes:
				// row 5 is asked for twice and read once
				t.Errorf("buffered: counted %d bytes, want %d distinct rows × %d", st.Bytes-before.Bytes, len(ids)-1, rowBytes)
			case mode != expertcache.IOBuffered && st.Bytes-before.Bytes != 5*4096:
				// rows 0 5 7 511 | 512 1009 | 4095 | 9000 | 16825: five pages of 512 rows
				t.Errorf("bounded: counted %d bytes, want the 5 pages holding the rows", st.Bytes-before.Bytes)
			}
			cached := cachedBytes(t, []string{table})
			if mode == expertcache.IODirect && cached != 0 {
				t.Errorf("direct reads left %d bytes of %s in the page cache", cached, table)
			}
			if mode == expertcache.IOBuffered && cached == 0 {
				t.Logf("buffered reads left nothing in the page cache (the kernel may drop it)")
			}
			for _, p := range refs[:6] { // against transformers: the float32 KV cache
				var row0 []float32
				_, err := e.NewSession(SessionOptions{KVBits: 32}).Generate(context.Background(), p.IDs, GenerateOptions{MaxTokens: 4, IgnoreEOS: true,
					OnLogits: func(row []float32) error {
						if row0 == nil {
							row0 = append([]float32(nil), row...)
						}
						logits[k] = append(logits[k], row...)
						return nil
					}})
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(row0, p.LastLogits); d > 1e-3 {
					t.Errorf("last-token logits differ from transformers by %g", d)
				}
			}
		})
	}
	if logits[0] == nil || logits[1] == nil {
		return
	}
	if i := firstBitDiff(logits[0], logits[1]); i >= 0 {
		t.Fatalf("logit %d differs between bounded and page-cache n-gram reads", i)
	}
}

// faultyNgramFile fails the read of the span at byte failAt.
type faultyNgramFile struct {
	ngramFile
	failAt int64
	err    error
}

func (f faultyNgramFile) ReadBlock(buf []byte, off int64) error {
	if off <= f.failAt && f.failAt < off+int64(len(buf)) {
		return f.err
	}
	return f.ngramFile.ReadBlock(buf, off)
}

// TestQwen38NgramReadFaults: an I/O error or a short read of an n-gram row,
// in a read ahead or a direct read, fails the Forward with an error that
// names the table's file and the row.
// ngramEngine loads a qwen38 install on one thread (closed when the test
// ends) and hands back its n-gram tables, for tests that reach into them.
func ngramEngine(t *testing.T, dir string) (*Engine, *ngramTables) {
	t.Helper()
	e, err := Load(dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, e.model.(*q38Model).tables
}

func TestQwen38NgramReadFaults(t *testing.T) {
	prompt := loadRefs(t, "tiny-qwen38.refs.json")[0].IDs
	for _, env := range []string{"1", "0"} {
		t.Run("NVMAI_BOUNDED_IO="+env, func(t *testing.T) {
			t.Setenv(expertcache.BoundedIOEnv, env)
			t.Run("EIO", func(t *testing.T) {
				e, tables := ngramEngine(t, install(t, qwen38Layouts[0], 16))
				en := tables.entries[0]
				base := tables.files[0]
				row := int64(5000)
				tables.files[0] = faultyNgramFile{ngramFile: base, err: unix.EIO,
					failAt: row/en.RowsPerBlock*en.BlockBytes + row%en.RowsPerBlock*en.RowBytes}
				dst := make([]float32, en.RowWidth)
				err := tables.Rows(0, []int64{row}, dst)
				checkNgramFault(t, err, en.File, fmt.Sprintf("row %d", row), unix.EIO)
				tables.Prefetch(0, []int64{1, row})
				err = tables.Rows(0, []int64{1, row}, make([]float32, 2*en.RowWidth))
				checkNgramFault(t, err, en.File, fmt.Sprintf("row %d", row), unix.EIO)
				// Through the model (read ahead, then the PLE layer): every read fails.
				tables.files[0] = alwaysFail{base}
				_, err = e.NewSession(SessionOptions{}).Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 2})
				checkNgramFault(t, err, en.File, "row ", unix.EIO)
			})
			t.Run("short read", func(t *testing.T) {
				dir := copyInstall(t, install(t, qwen38Layouts[0], 16))
				_, tables := ngramEngine(t, dir)
				en := tables.entries[0]
				// The file shrinks after it was checked and opened.
				if err := os.Truncate(filepath.Join(dir, filepath.FromSlash(en.File)), 8192); err != nil {
					t.Fatal(err)
				}
				row := en.Rows - 1 // in the last block, past the cut
				err := tables.Rows(0, []int64{0, row}, make([]float32, 2*en.RowWidth))
				checkNgramFault(t, err, en.File, fmt.Sprintf("row %d", row), nil)
				if !strings.Contains(fmt.Sprint(err), "unexpected EOF") {
					t.Errorf("short read: %v does not say the file ended", err)
				}
				if err := tables.Rows(0, []int64{0, 1000}, make([]float32, 2*en.RowWidth)); err != nil {
					t.Errorf("rows before the cut: %v", err)
				}
			})
		})
	}
}

// alwaysFail fails every read with EIO.
type alwaysFail struct{ ngramFile }

func (alwaysFail) ReadBlock([]byte, int64) error { return unix.EIO }

func checkNgramFault(t *testing.T, err error, file, row string, want error) {
	t.Helper()
	if err == nil {
		t.Fatal("a failing n-gram read gave no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, filepath.FromSlash(file)) || !strings.Contains(msg, row) {
		t.Errorf("error %q does not name the file %s and %s", msg, file, row)
	}
	if want != nil && !errors.Is(err, want) {
		t.Errorf("error %q does not wrap %v", msg, want)
	}
}

// TestQwen38FootprintCountsNgramBuffers: the footprint's n-gram term bounds
// what the reader holds after a prompt longer than one pass (its read-ahead
// buffers at their largest), and other installs have none.
func TestQwen38FootprintCountsNgramBuffers(t *testing.T) {
	dir := install(t, qwen38Layouts[0], 16)
	in, err := OpenInstall(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	f, err := ComputeFootprint(in, FootprintOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if f.NgramBuffers <= 0 || !strings.Contains(f.String(), "n-gram read buffers") {
		t.Fatalf("footprint %s has no n-gram term", f)
	}
	e, err := Load(dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids := loadRefs(t, "tiny-qwen38.refs.json")
	var long []int
	for _, p := range ids {
		long = append(long, p.IDs...)
	}
	long = long[:min(len(long), 300)] // past one 256-token pass
	if _, err := e.NewSession(SessionOptions{}).Generate(context.Background(), long, GenerateOptions{MaxTokens: 2, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	tables := e.model.(*q38Model).tables
	var held int64
	for _, r := range tables.reads {
		if r != nil {
			held += int64(cap(r.ids))*8 + int64(cap(r.rows))*4
		}
	}
	for _, b := range tables.scratch {
		held += int64(cap(b))
	}
	if held == 0 || held > f.NgramBuffers {
		t.Fatalf("the reader holds %d bytes, the footprint counts %d", held, f.NgramBuffers)
	}
	t.Logf("n-gram reader holds %d bytes of the footprint's %d", held, f.NgramBuffers)
	moe, err := OpenInstall(install(t, "tiny-moe-fused", 4))
	if err != nil {
		t.Fatal(err)
	}
	defer moe.Close()
	if g, err := ComputeFootprint(moe, FootprintOptions{Threads: 1}); err != nil || g.NgramBuffers != 0 {
		t.Fatalf("a qwen3_5_moe footprint has n-gram buffers %d (%v)", g.NgramBuffers, err)
	}
}
