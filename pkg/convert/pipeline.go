package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// blockBytes bounds how much of one tensor is held in memory at a time.
const blockBytes = 16 << 20

type converter struct {
	snap    *hf.Snapshot
	opt     *Options
	outs    []*output
	acc     *expertAccumulator
	sources []packexperts.SourceFile
	skipped map[string]int
	done    int64
	total   int64
	ok      bool
}

func newConverter(snap *hf.Snapshot, opt *Options) (*converter, error) {
	c := &converter{snap: snap, opt: opt, skipped: map[string]int{}}
	var mtp []safetensors.TensorSpec
	var moeLayers []int
	for _, st := range c.ordered() {
		if st.Role == hf.MTP {
			mtp = append(mtp, safetensors.TensorSpec{Name: st.Name, DType: st.Info.DType, Shape: st.Info.Shape})
		}
	}
	if hasExperts(snap.Architecture) {
		for l := 0; l < snap.Geometry.NumLayers; l++ {
			moeLayers = append(moeLayers, l)
		}
	}
	c.acc = newExpertAccumulator(moeLayers, snap.Geometry.NumExperts)
	for _, t := range opt.Targets {
		o, err := newOutput(snap, opt, t, mtp)
		if o != nil {
			c.outs = append(c.outs, o)
		}
		if err != nil {
			c.cleanup()
			return nil, err
		}
	}
	return c, nil
}

// ordered lists the snapshot's tensors in read order: shard by shard, each
// shard in data-offset order, so every shard is read once, front to back.
func (c *converter) ordered() []*hf.SourceTensor {
	ts := make([]*hf.SourceTensor, len(c.snap.Tensors))
	for i := range c.snap.Tensors {
		ts[i] = &c.snap.Tensors[i]
	}
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Shard != ts[j].Shard {
			return ts[i].Shard < ts[j].Shard
		}
		return ts[i].Info.Begin < ts[j].Info.Begin
	})
	return ts
}

func (c *converter) cleanup() {
	for _, o := range c.outs {
		if !c.ok {
			o.abort()
		}
		o.unlock()
	}
}

// stream reads every shard once, hashing it on the way, and hands each
// tensor to its role's writer.
func (c *converter) stream(ctx context.Context) error {
	byShard := map[string][]*hf.SourceTensor{}
	var shards []string
	for _, st := range c.ordered() {
		if _, ok := byShard[st.Shard]; !ok {
			shards = append(shards, st.Shard)
		}
		byShard[st.Shard] = append(byShard[st.Shard], st)
	}
	for _, s := range shards {
		if fi, err := os.Stat(filepath.Join(c.snap.Dir, s)); err == nil {
			c.total += fi.Size()
		}
	}
	for _, s := range shards {
		if err := c.streamShard(ctx, s, byShard[s]); err != nil {
			return err
		}
	}
	for prefix, n := range c.skipped {
		c.opt.Notice(fmt.Sprintf("skipped %d %s tensors (vision tower: nvmai runs the text model only)", n, prefix))
	}
	return c.acc.complete()
}

// shardReader reads one shard front to back. A goroutine reads ahead in
// blocks and hashes them, so the disk read and the sha256 of the source
// overlap the quantization of the previous blocks.
type shardReader struct {
	chunks <-chan readChunk
	cur    []byte
	err    error
	pos    int64
	c      *converter
	ctx    context.Context
	stop   chan struct{}
	sum    chan []byte
}

type readChunk struct {
	data []byte
	err  error
}

// readAheadChunks bounds the memory read ahead: chunks × blockBytes.
const readAheadChunks = 2

func newShardReader(ctx context.Context, c *converter, f io.Reader) *shardReader {
	chunks := make(chan readChunk, readAheadChunks)
	s := &shardReader{chunks: chunks, c: c, ctx: ctx, stop: make(chan struct{}), sum: make(chan []byte, 1)}
	go func() {
		defer close(chunks)
		h := sha256.New()
		for {
			buf := make([]byte, blockBytes)
			n, err := io.ReadFull(f, buf)
			h.Write(buf[:n])
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = io.EOF
				s.sum <- h.Sum(nil)
			}
			select {
			case chunks <- readChunk{buf[:n], err}:
			case <-s.stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *shardReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	for len(s.cur) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		ch, ok := <-s.chunks
		if !ok {
			return 0, io.EOF
		}
		s.cur, s.err = ch.data, ch.err
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	s.pos += int64(n)
	s.c.done += int64(n)
	if s.c.opt.Progress != nil {
		s.c.opt.Progress(s.c.done, s.c.total)
	}
	return n, nil
}

// close stops the read-ahead goroutine early (on an error).
func (s *shardReader) close() { close(s.stop) }

// testHookShardOpened, when set, runs after a shard's header is validated
// and before its data is read: tests replace the file there.
var testHookShardOpened func(path string)

// streamShard reads one shard through the descriptor whose header was
// validated (against the snapshot's, by OpenShard), so a file replaced by
// path mid-conversion cannot feed its bytes in at the old offsets. After
// the last read the file must still be that one, unmodified and of the size
// its header implies; otherwise the bytes converted (and hashed into the
// receipt's source list) may not be what was validated.
func (c *converter) streamShard(ctx context.Context, name string, tensors []*hf.SourceTensor) error {
	path := filepath.Join(c.snap.Dir, filepath.FromSlash(name))
	sf, err := c.snap.OpenShard(name)
	if err != nil {
		return err
	}
	defer sf.Close()
	if testHookShardOpened != nil {
		testHookShardOpened(path)
	}
	dataOff := sf.Header().DataOffset
	sr := newShardReader(ctx, c, sf.Stream())
	defer sr.close()
	if _, err := io.CopyN(io.Discard, sr, dataOff); err != nil {
		return fmt.Errorf("%s: reading header: %w", path, err)
	}
	for _, st := range tensors {
		if skip := dataOff + st.Info.Begin - sr.pos; skip > 0 {
			if _, err := io.CopyN(io.Discard, sr, skip); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		if err := c.tensor(st, sr); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", path, st.Name, err)
		}
	}
	if _, err := io.Copy(io.Discard, sr); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if sr.pos != sf.Size() {
		return changedWhileConverting(path, fmt.Sprintf("read %d bytes, but its header's data region ends at byte %d", sr.pos, sf.Size()))
	}
	var changed *safetensors.ChangedError
	if err := sf.CheckUnchanged(); errors.As(err, &changed) {
		return changedWhileConverting(path, changed.What)
	} else if err != nil {
		return err
	}
	c.sources = append(c.sources, packexperts.SourceFile{Name: name, Size: sr.pos, SHA256: hex.EncodeToString(<-sr.sum)})
	return nil
}

func changedWhileConverting(path, what string) error {
	return fmt.Errorf("%s changed while it was being converted (%s); rerun when it is no longer being written", path, what)
}

func (c *converter) tensor(st *hf.SourceTensor, r io.Reader) error {
	switch st.Role {
	case hf.Visual:
		c.skipped["model.visual.*"]++
		_, err := io.CopyN(io.Discard, r, st.Info.Size())
		return err
	case hf.MTP:
		return c.draftTensor(st, r)
	case hf.Expert:
		return c.expertTensor(st, r)
	case hf.Resident:
		return c.residentTensor(st, r)
	case hf.NGramTable:
		return c.ngramTensor(st, r)
	case hf.NGramBuffer:
		// Checked against the config at Open; the manifest carries the values.
		_, err := io.CopyN(io.Discard, r, st.Info.Size())
		return err
	}
	return fmt.Errorf("unhandled tensor role %v", st.Role)
}

func (c *converter) draftTensor(st *hf.SourceTensor, r io.Reader) error {
	data := make([]byte, st.Info.Size())
	if _, err := io.ReadFull(r, data); err != nil {
		return err
	}
	for _, o := range c.outs {
		if err := o.draft.WriteTensor(st.Name, data); err != nil {
			return err
		}
	}
	return nil
}

// residentTensor streams a tensor in row blocks into every output.
func (c *converter) residentTensor(st *hf.SourceTensor, r io.Reader) error {
	rows, cols := matrixDims(st.Info.Shape)
	return c.rowBlocks(r, st.Info.DType, rows, cols, func(r0 int, blk *block) error {
		for _, o := range c.outs {
			t := o.tensors[st.Canonical]
			if err := writeRows(o.resident, 0, t, r0, blk, c.opt.Threads); err != nil {
				return err
			}
		}
		return nil
	})
}

// ngramTensor writes one shard (or the whole) of a PLE layer's n-gram table
// into every output's table file, at its rows.
func (c *converter) ngramTensor(st *hf.SourceTensor, r io.Reader) error {
	k := slices.Index(c.snap.Geometry.Qwen4Exp.PLELayers, st.Layer)
	first, ok := c.snap.NGramFirstRow[st.Name]
	if k < 0 || !ok {
		return fmt.Errorf("internal error: n-gram tensor %s was not planned", st.Name)
	}
	rows, cols := matrixDims(st.Info.Shape)
	return c.rowBlocks(r, st.Info.DType, rows, cols, func(r0 int, blk *block) error {
		for _, o := range c.outs {
			if err := writeNGramRows(o.ngram[k], &o.man.NGram[k], first+int64(r0), blk.bf16()); err != nil {
				return err
			}
		}
		return nil
	})
}

// expertTensor files one expert tensor (or every expert of a fused one) at
// its own index in each output's layer file.
func (c *converter) expertTensor(st *hf.SourceTensor, r io.Reader) error {
	first, count := st.Expert, 1
	shape := st.Info.Shape
	if st.Fused {
		first, count, shape = 0, int(shape[0]), shape[1:]
	}
	rows, cols := matrixDims(shape)
	for e := first; e < first+count; e++ {
		if err := c.acc.file(st.Layer, e, st.Proj, st.Name); err != nil {
			return err
		}
		err := c.rowBlocks(r, st.Info.DType, rows, cols, func(r0 int, blk *block) error {
			return c.writeExpertRows(st, e, rows, r0, blk)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *converter) writeExpertRows(st *hf.SourceTensor, e, rows, r0 int, blk *block) error {
	for _, o := range c.outs {
		base := int64(e) * o.man.Experts.Stride
		f := o.experts[st.Layer]
		if st.Proj != "gate_up" {
			if err := writeRows(f, base, o.parts[st.Proj], r0, blk, c.opt.Threads); err != nil {
				return err
			}
			continue
		}
		// gate_up_proj[e] stacks gate rows [0, I) over up rows [I, 2I).
		half := rows / 2
		for _, piece := range blk.split(r0, half) {
			part := o.parts["gate"]
			if piece.r0 >= half {
				part, piece.r0 = o.parts["up"], piece.r0-half
			}
			if err := writeRows(f, base, part, piece.r0, piece.b, c.opt.Threads); err != nil {
				return err
			}
		}
	}
	return nil
}

// matrixDims views a tensor as rows × cols: 1-D as one row, higher ranks as
// shape[0] rows of everything else.
func matrixDims(shape []int64) (rows, cols int) {
	if len(shape) == 0 {
		return 1, 1
	}
	if len(shape) == 1 {
		return 1, int(shape[0])
	}
	cols = 1
	for _, d := range shape[1:] {
		cols *= int(d)
	}
	return int(shape[0]), cols
}

// rowBlocks reads rows×cols elements of dtype from r in blocks of whole rows
// and calls fn for each block.
func (c *converter) rowBlocks(r io.Reader, dt safetensors.DType, rows, cols int, fn func(r0 int, b *block) error) error {
	rowBytes := cols * dt.Size()
	per := max(1, blockBytes/max(rowBytes, 1))
	for r0 := 0; r0 < rows; r0 += per {
		n := min(per, rows-r0)
		raw := make([]byte, n*rowBytes)
		if _, err := io.ReadFull(r, raw); err != nil {
			return fmt.Errorf("reading rows %d..%d: %w", r0, r0+n, err)
		}
		blk, err := newBlock(raw, dt, n, cols)
		if err != nil {
			return err
		}
		if err := fn(r0, blk); err != nil {
			return err
		}
	}
	return nil
}
