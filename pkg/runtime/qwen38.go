package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
)

// A qwen4_exp install (Qwen3.8-Flash-Next) runs on package qwen38. This
// file registers it with the engine surface (model.Model, model.State) for
// the CPU: sessions, generation and sampling are the engine's, the sequence
// state is qwen38's, its n-gram tables are read here. Snapshots go to the
// RAM and disk prompt caches (model.Snapshotter, model.SnapshotReader: the
// qwen38 state codec, which carries the KV width). This glue moves to the
// qwen38 package with the layout (#36 item 3).

func init() {
	model.Register(packexperts.ArchQwen4Exp, model.CPU, model.Entry{Load: loadQwen38, Footprint: qwen38Footprint})
}

// expertIO is what the n-gram reader takes from the expert cache: its read
// mode and reader count (*expertcache.Cache, also under a route trace).
type expertIO interface {
	IOMode() expertcache.IOMode
	Stats() expertcache.Stats
}

// loadQwen38 builds the qwen38 model over the install's resident weights,
// the expert cache and the n-gram tables.
func loadQwen38(req model.Request) (model.Model, error) {
	if req.RopeScaling != "" && req.RopeScaling != model.RopeNone {
		return nil, fmt.Errorf("%s: rope scaling %q is not supported for qwen4_exp installs yet", req.Dir, req.RopeScaling)
	}
	cfg, err := qwen38.ConfigFromGeometry(req.Manifest.Geometry)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.Dir, err)
	}
	x, ok := req.Experts.(expertIO)
	if !ok {
		return nil, fmt.Errorf("%s: a qwen4_exp install needs routed experts; the manifest lists none", req.Dir)
	}
	tables, err := openNgramTables(req.Dir, req.Manifest, cfg, x.IOMode(), x.Stats().IOThreads)
	if err != nil {
		return nil, err
	}
	m, err := qwen38.New(cfg, q38Weights{Weights: req.Weights, dir: req.Dir, consts: tables.consts}, req.Experts, tables, req.Pool)
	if err != nil {
		tables.Close()
		return nil, fmt.Errorf("%s: %w", req.Dir, err)
	}
	return &q38Model{m: m, tables: tables}, nil
}

// qwen38Footprint replaces the trunk's sequence state by qwen38's: the KV
// cache at --kv-bits with the indexer's float32 keys, grown by doubling as
// qwen35's (the previous capacity is held while it copies), the PLE conv
// windows beside the GDN state, and the n-gram reader's buffers. The
// trunk (the qwen3_5_moe geometry) sizes the passes and the attention
// scores.
func qwen38Footprint(req model.FootprintRequest) (model.StateFootprint, error) {
	if req.RopeScaling != "" && req.RopeScaling != model.RopeNone {
		return model.StateFootprint{}, fmt.Errorf("rope scaling %q is not supported for qwen4_exp installs yet", req.RopeScaling)
	}
	trunk, err := qwen35.ConfigFromGeometry(qwen35.ArchMoE, req.Manifest.Geometry)
	if err != nil {
		return model.StateFootprint{}, err
	}
	f, err := qwen35.FootprintOf(trunk, req)
	if err != nil {
		return f, err
	}
	q, err := qwen38.ConfigFromGeometry(req.Manifest.Geometry)
	if err != nil {
		return f, err
	}
	ctx := f.MaxContext // f.KVBits is the trunk's: the default applied, checked
	f.KV = q.KVBytes(ctx, f.KVBits)
	f.KVGrowth = q.KVBytes(blocks.PreviousKVCapacity(ctx), f.KVBits)
	f.Recurrent = q.FixedStateBytes()
	f.ReadBuffers = ngramBufferBytes(q, req.Manifest.NGram, qwen38.MaxChunk(), req.IOThreads)
	return f, nil
}

// q38Weights serves the resident tensors and, under their checkpoint names,
// the n-gram hashing constants the manifest carries, so qwen38.New checks
// them against its own recomputation.
type q38Weights struct {
	model.Weights
	dir    string
	consts map[string][]int64
}

func (w q38Weights) Has(name string) bool {
	if _, ok := w.consts[name]; ok {
		return true
	}
	return w.Weights.Has(name)
}

func (w q38Weights) Int64s(name string) ([]int64, error) {
	v, ok := w.consts[name]
	if !ok {
		return nil, fmt.Errorf("%s: no int64 buffer %s", w.dir, name)
	}
	return v, nil
}

// ngramTables reads rows of the install's n-gram tables
// (ngram/layer-NNN.bin, docs/qwen38.md "Row address") through the expert
// cache's bounded reader (expertcache.BlockFile, in the cache's own read
// mode): with O_DIRECT each row costs the aligned page that holds it, read
// into a fixed scratch buffer, so the page cache does not grow; with
// NVMAI_BOUNDED_IO=0 (IOBuffered) each row is one plain positioned read of
// its bytes. A chunk's rows are known from its token ids before its first
// layer runs: Prefetch starts reading them on a goroutine of its own, and
// Rows, at the PLE layer, takes them from there (or reads them itself when
// they were not announced). Every buffer is bounded and reused; their sum
// is ngramBufferBytes, which the footprint counts.
type ngramTables struct {
	files   []ngramFile
	entries []packexperts.NGram
	consts  map[string][]int64 // checkpoint name → buffer, for q38Weights
	mode    expertcache.IOMode

	// One read at a time (a read ahead or a Rows that reads itself), on
	// up to len(scratch) workers, each with its own aligned span buffer.
	ioMu    sync.Mutex
	scratch [][]byte
	order   []int // scratch: row indices sorted by file offset

	bytesRead atomic.Int64 // from the files (whole pages in the bounded modes)
	rowsRead  atomic.Int64
	waitNanos atomic.Int64 // Rows waiting for rows not yet read

	mu      sync.Mutex
	pending []*ngramRead // per PLE layer: the rows being read ahead, or nil
	reads   []*ngramRead // per PLE layer: the buffers a read ahead reuses
}

// ngramFile is what ngramTables reads a table through
// (*expertcache.BlockFile; tests put a faulty one in its place).
type ngramFile interface {
	Path() string
	Span(off, n int64) (start, length int64)
	ReadBlock(buf []byte, off int64) error
	Close() error
}

// ngramRead is one Prefetch in flight.
type ngramRead struct {
	ids  []int64
	rows []float32
	done chan error // receives the read's outcome once
}

// ngramReadThreads is how many reads one chunk's rows are spread over at
// most when the expert cache does not say.
const ngramReadThreads = expertcache.DefaultIOThreads

// openNgramTables opens one table per PLE layer in mode (the expert
// cache's) and checks its manifest entry against the geometry. threads
// bounds the parallel reads of one chunk.
func openNgramTables(dir string, man *packexperts.Manifest, cfg qwen38.Config, mode expertcache.IOMode, threads int) (*ngramTables, error) {
	entries := man.NGram
	if len(entries) != len(cfg.PLELayers) {
		return nil, fmt.Errorf("%s: the manifest has %d n-gram tables for %d PLE layers; reconvert the install", dir, len(entries), len(cfg.PLELayers))
	}
	if threads <= 0 {
		threads = ngramReadThreads
	}
	t := &ngramTables{entries: entries, consts: map[string][]int64{}, mode: mode,
		pending: make([]*ngramRead, len(entries)), reads: make([]*ngramRead, len(entries))}
	span := 0
	for k, en := range entries {
		if err := checkNgramEntry(en, cfg, k); err != nil {
			t.Close()
			return nil, fmt.Errorf("%s: manifest ngram[%d]: %w; reconvert the install", dir, k, err)
		}
		path := filepath.Join(dir, filepath.FromSlash(en.File))
		st, err := os.Stat(path)
		if err != nil {
			t.Close()
			return nil, err
		}
		if want := (en.Rows + en.RowsPerBlock - 1) / en.RowsPerBlock * en.BlockBytes; st.Size() != want {
			t.Close()
			return nil, fmt.Errorf("%s: %s is %d bytes, its manifest entry needs %d; run nvmai-verify --verify-install %s", dir, en.File, st.Size(), want, dir)
		}
		f, err := expertcache.OpenBlockFile(path, mode)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.files = append(t.files, f)
		span = max(span, ngramSpanBytes(en))
		p := fmt.Sprintf("model.layers.%d.ple.ple_embedding.", en.Layer)
		t.consts[p+"layer_multipliers"] = en.Multipliers
		t.consts[p+"ngram_heads_vocab_sizes"] = en.VocabSizes
		t.consts[p+"ngram_heads_offsets"] = en.Offsets
	}
	for range threads {
		t.scratch = append(t.scratch, expertcache.AlignedBuffer(span))
	}
	return t, nil
}

// ngramSpanBytes bounds the bytes one row's read takes in any mode: the
// aligned pages holding it.
func ngramSpanBytes(en packexperts.NGram) int {
	const a = limits.DirectIOAlign
	return int((en.RowBytes+a-1)/a*a + a)
}

// ngramBufferBytes is the memory the n-gram reader holds at most for a
// model whose Forward passes carry at most chunk tokens, with threads
// workers: per PLE layer the read ahead's row ids and widened rows for one
// chunk, and every worker's span buffer (AlignedBuffer adds a page of
// slack to each).
func ngramBufferBytes(cfg qwen38.Config, entries []packexperts.NGram, chunk, threads int) int64 {
	if threads <= 0 {
		threads = ngramReadThreads
	}
	rows := int64(chunk) * int64(cfg.NgramHeads())
	var total int64
	span := 0
	for _, en := range entries {
		total += rows * (8 + 4*int64(en.RowWidth))
		span = max(span, ngramSpanBytes(en))
	}
	if len(entries) > 0 {
		total += int64(threads) * int64(span+limits.DirectIOAlign)
	}
	return total
}

func checkNgramEntry(en packexperts.NGram, cfg qwen38.Config, k int) error {
	dr := cfg.NgramRowWidth()
	switch {
	case en.Layer != cfg.PLELayers[k]:
		return fmt.Errorf("layer %d, the geometry's PLE layer is %d", en.Layer, cfg.PLELayers[k])
	case en.DType != packexperts.DTypeBF16 || en.Bits != 16:
		return fmt.Errorf("dtype %s (%d bits): only BF16 tables are supported", en.DType, en.Bits)
	case en.RowWidth != dr || en.RowBytes != int64(2*dr):
		return fmt.Errorf("rows of %d values in %d bytes, the geometry needs %d values of BF16", en.RowWidth, en.RowBytes, dr)
	case en.Rows != cfg.NgramRows(k):
		return fmt.Errorf("%d rows, the geometry's formula gives %d", en.Rows, cfg.NgramRows(k))
	case en.RowsPerBlock <= 0 || en.BlockBytes < en.RowsPerBlock*en.RowBytes:
		return fmt.Errorf("blocks of %d rows in %d bytes cannot hold rows of %d bytes", en.RowsPerBlock, en.BlockBytes, en.RowBytes)
	}
	return nil
}

// Prefetch implements qwen38.NgramPrefetcher: it starts reading the rows
// of ids and returns at once. A read ahead nobody took is waited for first,
// so at most one goroutine per PLE layer is ever in flight, and its
// buffers are reused.
func (t *ngramTables) Prefetch(ple int, ids []int64) {
	if ple < 0 || ple >= len(t.files) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drain(ple)
	r := t.reads[ple]
	if r == nil {
		r = &ngramRead{}
		t.reads[ple] = r
	}
	r.ids = append(r.ids[:0], ids...)
	r.rows = slices.Grow(r.rows[:0], len(ids)*t.entries[ple].RowWidth)[:len(ids)*t.entries[ple].RowWidth]
	r.done = make(chan error, 1)
	t.pending[ple] = r
	go func() { r.done <- t.read(ple, r.ids, r.rows) }()
}

// drain waits for PLE layer ple's read ahead, if any, and forgets it.
// The caller holds t.mu.
func (t *ngramTables) drain(ple int) *ngramRead {
	r := t.pending[ple]
	if r != nil {
		err := <-r.done
		r.done <- err // for the caller that wants the outcome
		t.pending[ple] = nil
	}
	return r
}

// Rows implements qwen38.NgramTable.
func (t *ngramTables) Rows(ple int, ids []int64, dst []float32) error {
	if ple < 0 || ple >= len(t.files) {
		return fmt.Errorf("no n-gram table for PLE layer %d", ple)
	}
	start := time.Now()
	defer func() { t.waitNanos.Add(int64(time.Since(start))) }()
	t.mu.Lock()
	r := t.drain(ple)
	if r != nil && slices.Equal(r.ids, ids) {
		defer t.mu.Unlock() // the buffers are reused by the next Prefetch
		if err := <-r.done; err != nil {
			return err
		}
		copy(dst, r.rows)
		return nil
	}
	t.mu.Unlock()
	return t.read(ple, ids, dst)
}

// read fills dst with the rows of ids. Rows are read in file order, each
// aligned span once however many of the ids it holds, spread over the
// workers.
func (t *ngramTables) read(ple int, ids []int64, dst []float32) error {
	en, f := &t.entries[ple], t.files[ple]
	offs := make([]int64, len(ids))
	for i, id := range ids {
		if id < 0 || id >= en.Rows {
			return fmt.Errorf("%s: n-gram row %d outside the table's %d rows", f.Path(), id, en.Rows)
		}
		offs[i] = id/en.RowsPerBlock*en.BlockBytes + id%en.RowsPerBlock*en.RowBytes
	}
	t.ioMu.Lock()
	defer t.ioMu.Unlock()
	order := t.order[:0]
	for i := range ids {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int { return cmpInt64(offs[a], offs[b]) })
	t.order = order
	// groups[g] = first index into order of the g-th distinct span.
	var groups []int
	prev := int64(-1)
	for j, i := range order {
		s, _ := f.Span(offs[i], en.RowBytes)
		if j == 0 || s != prev {
			groups = append(groups, j)
		}
		prev = s
	}
	workers := min(len(t.scratch), len(groups))
	errs := make([]error, workers)
	bytes := make([]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf := t.scratch[w]
			for g := w; g < len(groups); g += workers {
				lo, hi := groups[g], len(order)
				if g+1 < len(groups) {
					hi = groups[g+1]
				}
				first := order[lo]
				s, _ := f.Span(offs[first], en.RowBytes)
				// the group's rows all start in the span's first page
				_, l := f.Span(s, offs[order[hi-1]]+en.RowBytes-s)
				if err := f.ReadBlock(buf[:l], s); err != nil {
					errs[w] = fmt.Errorf("%s: reading n-gram row %d (byte %d of the n-gram table of layer %d): %w", f.Path(), ids[first], offs[first], en.Layer, err)
					return
				}
				bytes[w] += l
				for _, i := range order[lo:hi] {
					o := offs[i] - s
					quant.WidenBF16(dst[i*en.RowWidth:(i+1)*en.RowWidth], buf[o:o+en.RowBytes])
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var n int64
	for _, b := range bytes {
		n += b
	}
	t.rowsRead.Add(int64(len(ids)))
	t.bytesRead.Add(n)
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (t *ngramTables) Close() error {
	t.mu.Lock()
	for ple := range t.pending {
		t.drain(ple)
	}
	t.mu.Unlock()
	var errs []error
	for _, f := range t.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// q38Model runs a qwen4_exp model for the engine's sessions.
type q38Model struct {
	m      *qwen38.Model
	tables *ngramTables
}

func (b *q38Model) Info() model.Info {
	c := b.m.Config()
	return model.Info{Name: model.CPU, Architecture: packexperts.ArchQwen4Exp, Device: model.CPU, VocabSize: c.VocabSize, MaxContext: c.MaxContext}
}

// NewState implements model.Model; a zero KVBits is model.DefaultKVBits,
// as for qwen35.
func (b *q38Model) NewState(opt model.StateOptions) (model.State, error) {
	bits := opt.KVBits
	if bits == 0 {
		bits = model.DefaultKVBits
	}
	if !model.ValidKVBits(bits) {
		return nil, fmt.Errorf("qwen38: KV cache width %d bits: use 8, 16 or 32", bits)
	}
	st := b.m.NewState(qwen38.StateOptions{KVInitial: opt.KVInitial, MaxContext: opt.MaxContext, KVBits: bits})
	return &q38State{m: b.m, st: st, logits: make([]float32, b.m.Config().VocabSize)}, nil
}

// StateBytes implements model.StateSizer.
func (b *q38Model) StateBytes(tokens, kvBits int) int64 {
	c := b.m.Config()
	return c.KVBytes(tokens, kvBits) + c.FixedStateBytes()
}

func (b *q38Model) Close() { b.tables.Close() }

// NgramStats counts what the n-gram table reader did so far (qwen4_exp
// installs).
type NgramStats struct {
	Rows  int64 // rows handed to the model
	Bytes int64 // bytes read from the tables: whole aligned pages in the bounded modes, the rows' own bytes with NVMAI_BOUNDED_IO=0
	// Wait is the time the PLE layers waited for rows: what the read
	// ahead (started before the pass's first layer) did not hide.
	Wait time.Duration
}

// NgramStats is the n-gram reader's counters (zero but for qwen4_exp).
func (e *Engine) NgramStats() NgramStats {
	if q, ok := e.model.(*q38Model); ok {
		return q.NgramStats()
	}
	return NgramStats{}
}

// ngramRowBytes is the bytes of one n-gram row (0 but for qwen4_exp).
func (e *Engine) ngramRowBytes() int64 {
	if q, ok := e.model.(*q38Model); ok && len(q.tables.entries) > 0 {
		return q.tables.entries[0].RowBytes
	}
	return 0
}

// NgramStats reports the n-gram rows and bytes read so far.
func (b *q38Model) NgramStats() NgramStats {
	t := b.tables
	return NgramStats{Rows: t.rowsRead.Load(), Bytes: t.bytesRead.Load(), Wait: time.Duration(t.waitNanos.Load())}
}

type q38State struct {
	m        *qwen38.Model
	st       *qwen38.State
	profile  *qwen38.StepProfile
	override model.RouteOverride
	logits   []float32
}

// q38Snapshot is a copy of the sequence holding exactly the written tokens.
type q38Snapshot struct {
	st    *qwen38.State
	bytes int64
}

func (sn *q38Snapshot) Len() int     { return sn.st.Len() }
func (sn *q38Snapshot) Bytes() int64 { return sn.bytes }

// WriteTo writes the snapshot in qwen38's state layout (the disk prompt
// cache).
func (sn *q38Snapshot) WriteTo(w io.Writer) (int64, error) { return sn.st.WriteTo(w) }

// ReadSnapshot implements model.SnapshotReader: a snapshot of another
// model geometry, KV width or past this session's context is refused.
func (s *q38State) ReadSnapshot(r io.Reader) (model.Snapshot, error) {
	st, err := s.m.ReadState(r, qwen38.StateOptions{MaxContext: s.st.MaxContext(), KVBits: s.st.KVBits()})
	if err != nil {
		return nil, err
	}
	return s.snapshotOf(st), nil
}

func (s *q38State) snapshotOf(st *qwen38.State) *q38Snapshot {
	return &q38Snapshot{st: st, bytes: s.m.Config().KVBytes(st.Len(), st.KVBits()) + s.m.Config().FixedStateBytes()}
}

// KVBits implements model.KVWidth.
func (s *q38State) KVBits() int { return s.st.KVBits() }

// FillSynthetic implements model.SyntheticFiller (bench --fill-context).
func (s *q38State) FillSynthetic(n int, seed uint64) error { return s.st.FillSynthetic(n, seed) }

// Snapshot implements model.Snapshotter (the server's RAM prompt cache).
func (s *q38State) Snapshot() (model.Snapshot, error) {
	return s.snapshotOf(s.st.Clone()), nil
}

// Restore implements model.Snapshotter: the snapshot must come from the
// same model and fit this session's context.
func (s *q38State) Restore(sn model.Snapshot) error {
	q, ok := sn.(*q38Snapshot)
	if !ok {
		return fmt.Errorf("runtime: the snapshot does not come from a qwen4_exp session")
	}
	if q.st.Len() > s.st.MaxContext() {
		return fmt.Errorf("runtime: the snapshot holds %d tokens, this session's max context is %d", q.st.Len(), s.st.MaxContext())
	}
	st, err := q.st.CloneFor(s.m, s.st.MaxContext(), s.st.KVBits())
	if err != nil {
		return err
	}
	st.SetStepProfile(s.profile)
	st.SetRouteOverride(s.override)
	s.st = st
	return nil
}

// SetRouteOverride implements model.RouteOverrider.
func (s *q38State) SetRouteOverride(o model.RouteOverride) {
	s.override = o
	s.st.SetRouteOverride(o)
}

// SetStepProfile implements model.Profiler.
func (s *q38State) SetStepProfile(p *model.StepProfile) {
	s.profile = p
	s.st.SetStepProfile(p)
}

func (s *q38State) Len() int        { return s.st.Len() }
func (s *q38State) MaxContext() int { return s.st.MaxContext() }
func (s *q38State) Close()          {}

func (s *q38State) Forward(ids []int) error { return s.m.Forward(s.st, ids, s.logits, false) }

func (s *q38State) Logits(dst []float32) error {
	copy(dst, s.logits)
	return nil
}

// Argmax is the greedy pick, the lowest id among equal logits.
func (s *q38State) Argmax() (int, error) {
	best := 0
	for i, v := range s.logits {
		if v > s.logits[best] {
			best = i
		}
	}
	return best, nil
}
