package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
	"github.com/nvmai/nvmai/pkg/runtime/qwen38"
)

// A qwen4_exp install (Qwen3.8-Flash-Next) runs on package qwen38. It
// plugs into the engine through the Backend seam: sessions, generation and
// sampling are the engine's, the sequence state is qwen38's. Snapshots (the
// server's prompt cache) and --fill-context are not wired for it yet.

// loadQwen38 builds the qwen38 model over the install's resident weights,
// the expert cache and the n-gram tables.
func (e *Engine) loadQwen38(opt Options) error {
	in := e.Install
	if opt.RopeScaling != "" && opt.RopeScaling != "none" {
		return fmt.Errorf("%s: rope scaling %q is not supported for qwen4_exp installs yet", in.Dir, opt.RopeScaling)
	}
	if opt.Backend != nil {
		return fmt.Errorf("%s: the qwen4_exp architecture runs on the CPU engine only", in.Dir)
	}
	cfg, err := qwen38.ConfigFromGeometry(in.Manifest.Geometry)
	if err != nil {
		return fmt.Errorf("%s: %w", in.Dir, err)
	}
	if in.Manifest.Experts == nil {
		return fmt.Errorf("%s: a qwen4_exp install needs routed experts; the manifest lists none", in.Dir)
	}
	if e.cache, err = openExperts(in, opt.Experts); err != nil {
		return err
	}
	e.experts = e.cache
	tables, err := openNgramTables(in, cfg)
	if err != nil {
		return err
	}
	e.pool = kernels.NewPool(opt.Threads)
	m, err := qwen38.New(cfg, q38Weights{Install: in, consts: tables.consts}, e.cache, tables, e.pool)
	if err != nil {
		tables.Close()
		return fmt.Errorf("%s: %w", in.Dir, err)
	}
	e.backend = &q38Backend{m: m, tables: tables}
	return nil
}

// q38Weights serves the resident tensors and, under their checkpoint names,
// the n-gram hashing constants the manifest carries, so qwen38.New checks
// them against its own recomputation.
type q38Weights struct {
	*Install
	consts map[string][]int64
}

func (w q38Weights) Has(name string) bool {
	if _, ok := w.consts[name]; ok {
		return true
	}
	return w.Install.Has(name)
}

func (w q38Weights) Int64s(name string) ([]int64, error) {
	v, ok := w.consts[name]
	if !ok {
		return nil, fmt.Errorf("%s: no int64 buffer %s", w.Dir, name)
	}
	return v, nil
}

// ngramTables reads rows of the install's n-gram tables
// (ngram/layer-NNN.bin, docs/qwen38.md "Row address") with one positioned
// read per row, and counts the bytes it reads. A chunk's rows are known
// from its token ids before its first layer runs: Prefetch starts reading
// them on a goroutine of their own, and Rows, at the PLE layer, takes them
// from there (or reads them itself when they were not announced). The
// reads go through the page cache for now; the bounded reader of the
// expert cache can take their place behind the same two calls.
type ngramTables struct {
	files     []*os.File
	entries   []packexperts.NGram
	consts    map[string][]int64 // checkpoint name → buffer, for q38Weights
	bytesRead atomic.Int64
	rowsRead  atomic.Int64

	mu      sync.Mutex
	pending []*ngramRead // per PLE layer: the rows being read ahead, or nil
}

// ngramRead is one Prefetch in flight.
type ngramRead struct {
	ids  []int64
	rows []float32
	done chan error // receives the read's outcome once
}

// openNgramTables opens one table per PLE layer and checks its manifest
// entry against the geometry.
func openNgramTables(in *Install, cfg qwen38.Config) (*ngramTables, error) {
	entries := in.Manifest.NGram
	if len(entries) != len(cfg.PLELayers) {
		return nil, fmt.Errorf("%s: the manifest has %d n-gram tables for %d PLE layers; reconvert the install", in.Dir, len(entries), len(cfg.PLELayers))
	}
	t := &ngramTables{entries: entries, consts: map[string][]int64{}, pending: make([]*ngramRead, len(entries))}
	for k, en := range entries {
		if err := checkNgramEntry(en, cfg, k); err != nil {
			t.Close()
			return nil, fmt.Errorf("%s: manifest ngram[%d]: %w; reconvert the install", in.Dir, k, err)
		}
		f, err := os.Open(filepath.Join(in.Dir, filepath.FromSlash(en.File)))
		if err != nil {
			t.Close()
			return nil, err
		}
		t.files = append(t.files, f)
		st, err := f.Stat()
		if err != nil {
			t.Close()
			return nil, err
		}
		if want := (en.Rows + en.RowsPerBlock - 1) / en.RowsPerBlock * en.BlockBytes; st.Size() != want {
			t.Close()
			return nil, fmt.Errorf("%s: %s is %d bytes, its manifest entry needs %d; run nvmai-verify --verify-install %s", in.Dir, en.File, st.Size(), want, in.Dir)
		}
		p := fmt.Sprintf("model.layers.%d.ple.ple_embedding.", en.Layer)
		t.consts[p+"layer_multipliers"] = en.Multipliers
		t.consts[p+"ngram_heads_vocab_sizes"] = en.VocabSizes
		t.consts[p+"ngram_heads_offsets"] = en.Offsets
	}
	return t, nil
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
// so at most one goroutine per PLE layer is ever in flight.
func (t *ngramTables) Prefetch(ple int, ids []int64) {
	if ple < 0 || ple >= len(t.files) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drain(ple)
	r := &ngramRead{ids: slices.Clone(ids), rows: make([]float32, len(ids)*t.entries[ple].RowWidth), done: make(chan error, 1)}
	t.pending[ple] = r
	go func() { r.done <- t.read(ple, r.ids, r.rows) }()
}

// drain waits for PLE layer ple's read ahead, if any, and forgets it.
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
	t.mu.Lock()
	r := t.drain(ple)
	t.mu.Unlock()
	if r != nil && slices.Equal(r.ids, ids) {
		if err := <-r.done; err != nil {
			return err
		}
		copy(dst, r.rows)
		return nil
	}
	return t.read(ple, ids, dst)
}

// read fills dst with the rows of ids, one positioned read each.
func (t *ngramTables) read(ple int, ids []int64, dst []float32) error {
	en, f := &t.entries[ple], t.files[ple]
	buf := make([]byte, en.RowBytes)
	for i, id := range ids {
		if id < 0 || id >= en.Rows {
			return fmt.Errorf("%s: row %d outside the table's %d rows", en.File, id, en.Rows)
		}
		off := id/en.RowsPerBlock*en.BlockBytes + id%en.RowsPerBlock*en.RowBytes
		if _, err := f.ReadAt(buf, off); err != nil {
			return fmt.Errorf("%s: reading row %d at byte %d: %w", en.File, id, off, err)
		}
		quant.WidenBF16(dst[i*en.RowWidth:(i+1)*en.RowWidth], buf)
	}
	t.rowsRead.Add(int64(len(ids)))
	t.bytesRead.Add(int64(len(ids)) * en.RowBytes)
	return nil
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

// q38Backend runs a qwen4_exp model for the engine's sessions.
type q38Backend struct {
	m      *qwen38.Model
	tables *ngramTables
}

func (b *q38Backend) Name() string { return "cpu" }

func (b *q38Backend) NewState(opt SessionOptions) (BackendState, error) {
	st := b.m.NewState(qwen38.StateOptions{MaxContext: opt.MaxContext})
	st.SetStepProfile(opt.StepProfile)
	return &q38State{m: b.m, st: st, profile: opt.StepProfile, logits: make([]float32, b.m.Config().VocabSize)}, nil
}

func (b *q38Backend) Close() { b.tables.Close() }

// ngramBytes is the n-gram table bytes read so far (0 but for qwen4_exp).
func (e *Engine) ngramBytes() int64 {
	if q, ok := e.backend.(*q38Backend); ok {
		_, b := q.NgramStats()
		return b
	}
	return 0
}

// NgramStats reports the n-gram rows and bytes read so far.
func (b *q38Backend) NgramStats() (rows, bytes int64) {
	return b.tables.rowsRead.Load(), b.tables.bytesRead.Load()
}

type q38State struct {
	m       *qwen38.Model
	st      *qwen38.State
	profile *qwen38.StepProfile
	logits  []float32
}

// snapshot copies the sequence (the server's prompt cache keeps it); the
// copy holds exactly the written tokens.
func (s *q38State) snapshot(pending []int) *Snapshot {
	c := s.m.Config()
	return &Snapshot{q38: s.st.Clone(), pending: slices.Clone(pending), bytes: c.KVBytes(s.st.Len()) + c.FixedStateBytes()}
}

// restore makes the sequence a copy of snap's, which must come from the
// same model and fit this session's context.
func (s *q38State) restore(snap *qwen38.State) error {
	if snap.Len() > s.st.MaxContext() {
		return fmt.Errorf("runtime: the snapshot holds %d tokens, this session's max context is %d", snap.Len(), s.st.MaxContext())
	}
	st, err := snap.CloneFor(s.m, s.st.MaxContext())
	if err != nil {
		return err
	}
	st.SetStepProfile(s.profile)
	s.st = st
	return nil
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
