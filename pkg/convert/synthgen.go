package convert

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/quant"
)

// synthBlock is the unit of random generation: block k of a blob is drawn
// from its own generator seeded by (seed, blob key, k), so any thread can
// make any block in any order and the bytes never depend on the thread
// count. Changing it changes the bytes: bump synthGenerator with it.
const synthBlock = 1 << 20

// synthDTBiasBound keeps dt_bias small, so the GDN decay rate is set by
// in_proj_a's output and A_log rather than by the bias.
const synthDTBiasBound = 0.1

// synthChunk is the target size of one write: large enough for sequential
// throughput, small enough that 2×threads of them in flight stay cheap.
const synthChunk = 4 << 20

// fillKind is the distribution of one blob; docs/synthetic.md states each.
type fillKind uint8

const (
	fillZero    fillKind = iota // F32 0: zero-centred norm weights (the runtime applies 1 + w)
	fillOne                     // F32 1: the gated GDN norm weight, applied as stored
	fillCodes                   // uniform random bytes: packed 4- or 8-bit codes
	fillScales                  // BF16 group scales
	fillBiases                  // BF16 group biases, from the same draws as the scales
	fillBF16                    // BF16 uniform with a given std
	fillALog                    // F32 log(U(1, 16))
	fillUniform                 // F32 U(−bound, bound)
	// fillHoleBiases are the biases of codes left as holes (--sparse):
	// ±scale·σ_code, a random sign per group from the scale's own draw,
	// so each weight (its group's bias) has the full install's std and
	// mean 0. The full install's biases, −scale·(2^bits−1)/2, would make
	// every weight of a zero-code expert negative: its output then has
	// one direction whatever the input, which swamps the residual stream
	// and makes every later router pick the same experts.
	fillHoleBiases
)

// blob is one contiguous run of a tensor's bytes (weights, scales or
// biases) and how to fill it.
type blob struct {
	key   string // generator stream; a tensor's scales and biases share one
	kind  fillKind
	bits  int     // code width, for scales and biases
	param float64 // target std of the weights, or the bound of fillUniform
}

// span is one synthBlock-sized piece of a blob at its place in a file.
type span struct {
	off   int64
	n     int
	blob  *blob
	block int
}

// synthFile is one payload file: its size and every generated span in
// offset order. Bytes no span covers (alignment and stride padding, zero
// norms) are zero.
type synthFile struct {
	name   string
	size   int64
	spans  []span
	sparse bool // all zeros, left as a hole: never written, only hashed
	// codeHoles leaves quantized codes out (zero) and writes only the
	// spans, so everything else stays a hole (--sparse expert files).
	codeHoles bool
}

// synthDiskBlock is the allocation unit diskBytes counts in: a written
// range takes every 4 KiB block it touches.
const synthDiskBlock = 4096

// diskBytes is what f takes on a file system that keeps holes.
func (f *synthFile) diskBytes() int64 {
	switch {
	case f.sparse:
		return 0
	case !f.codeHoles:
		return f.size
	}
	sort.Slice(f.spans, func(i, j int) bool { return f.spans[i].off < f.spans[j].off })
	var n, last int64 // last: the end of the last block counted
	for _, s := range f.spans {
		lo := max(s.off/synthDiskBlock*synthDiskBlock, last)
		hi := (s.off + int64(s.n) + synthDiskBlock - 1) / synthDiskBlock * synthDiskBlock
		if hi > lo {
			n += hi - lo
			last = hi
		}
	}
	return min(n, f.size)
}

// addTensor plans the blobs of a placed tensor whose offsets are relative
// to base (an expert record's start; 0 in resident.bin).
func (f *synthFile) addTensor(t *packexperts.Tensor, base int64, key string) error {
	std := 1 / math.Sqrt(float64(t.Shape[len(t.Shape)-1]))
	switch t.DType {
	case packexperts.DTypeU32:
		if !f.codeHoles {
			f.addBlob(base+t.Offset, t.Length, &blob{key: key + ".q", kind: fillCodes})
		}
		scales := key + ".scales"
		biases := fillBiases
		if f.codeHoles {
			biases = fillHoleBiases
		}
		f.addBlob(base+t.Scales.Offset, t.Scales.Length, &blob{key: scales, kind: fillScales, bits: t.Bits, param: std})
		f.addBlob(base+t.Biases.Offset, t.Biases.Length, &blob{key: scales, kind: biases, bits: t.Bits, param: std})
		return nil
	case packexperts.DTypeBF16:
		f.addBlob(base+t.Offset, t.Length, &blob{key: key, kind: fillBF16, param: std})
		return nil
	case packexperts.DTypeF32:
		b, err := floatBlob(t, key)
		if err != nil {
			return err
		}
		f.addBlob(base+t.Offset, t.Length, b)
		return nil
	}
	return fmt.Errorf("internal error: synth cannot fill %s tensor %s", t.DType, t.Name)
}

// floatBlob picks the distribution of an F32 tensor from its name.
func floatBlob(t *packexperts.Tensor, key string) (*blob, error) {
	switch {
	case strings.HasSuffix(t.Name, ".linear_attn.norm.weight"):
		return &blob{key: key, kind: fillOne}, nil
	case strings.HasSuffix(t.Name, "norm.weight"), strings.Contains(t.Name, ".ple.norm_"):
		// Zero-centred (1 + w) norms: hc_norm, q/k norms, the indexer's and PLE's.
		return &blob{key: key, kind: fillZero}, nil
	case strings.HasSuffix(t.Name, ".linear_attn.A_log"):
		return &blob{key: key, kind: fillALog}, nil
	case strings.HasSuffix(t.Name, ".linear_attn.dt_bias"):
		return &blob{key: key, kind: fillUniform, param: synthDTBiasBound}, nil
	case strings.HasSuffix(t.Name, ".linear_attn.conv1d.weight"), strings.HasSuffix(t.Name, ".ple.conv1d.weight"):
		// PyTorch's default Conv1d init: fan-in is the K taps of one channel.
		return &blob{key: key, kind: fillUniform, param: 1 / math.Sqrt(float64(t.Shape[len(t.Shape)-1]))}, nil
	}
	return nil, fmt.Errorf("internal error: synth has no distribution for F32 tensor %s", t.Name)
}

func (f *synthFile) addBlob(off, length int64, b *blob) {
	if b.kind == fillZero {
		return // write buffers start zeroed
	}
	for k := 0; int64(k)*synthBlock < length; k++ {
		start := int64(k) * synthBlock
		f.spans = append(f.spans, span{off: off + start, n: int(min(synthBlock, length-start)), blob: b, block: k})
	}
}

// chunk is one write: the file range [off, off+n) and the spans inside it.
type chunk struct {
	file  int
	off   int64
	n     int
	spans []span
}

// chunks tiles the whole file with writes of about synthChunk bytes, cut
// only between spans, so padding is written (as zeros) and hashed in place.
// A gap of more than synthChunk between spans (code holes) ends the chunk
// before it and is tiled with span-less chunks, so no chunk outgrows the
// writers' buffers.
func (f *synthFile) chunks(file int) []chunk {
	sort.Slice(f.spans, func(i, j int) bool { return f.spans[i].off < f.spans[j].off })
	var out []chunk
	start, first := int64(0), 0
	zeros := func(until int64) {
		for until-start > synthChunk {
			out = append(out, chunk{file, start, synthChunk, nil})
			start += synthChunk
		}
	}
	for i, s := range f.spans {
		if s.off-start > synthChunk {
			if first < i {
				prev := f.spans[i-1]
				end := prev.off + int64(prev.n)
				out = append(out, chunk{file, start, int(end - start), f.spans[first:i]})
				start, first = end, i
			}
			zeros(s.off)
		}
		if end := s.off + int64(s.n); end-start >= synthChunk {
			out = append(out, chunk{file, start, int(end - start), f.spans[first : i+1]})
			start, first = end, i+1
		}
	}
	if first < len(f.spans) && f.size-start > synthChunk {
		last := f.spans[len(f.spans)-1]
		end := last.off + int64(last.n)
		out = append(out, chunk{file, start, int(end - start), f.spans[first:]})
		start, first = end, len(f.spans)
	}
	if first == len(f.spans) {
		zeros(f.size)
	}
	if start < f.size || len(out) == 0 {
		out = append(out, chunk{file, start, int(f.size - start), f.spans[first:]})
	}
	return out
}

// wyrand is Wang Yi's wyrand generator: one multiply per 64 bits, about
// ten times faster than math/rand/v2's PCG and twenty times ChaCha8 here,
// which matters when the generator has to keep up with a disk.
type wyrand uint64

func (r *wyrand) next() uint64 {
	*r += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(uint64(*r), uint64(*r)^0xe7037ed1a0b428db)
	return hi ^ lo
}

// uniform returns a float64 in [0, 1).
func (r *wyrand) uniform() float64 { return float64(r.next()>>11) * 0x1p-53 }

// blockRNG seeds the generator of block k of the stream key: the first 8
// bytes of sha256("nvmai-synth-<generator>\0" ‖ seed ‖ key ‖ "\0" ‖ k),
// integers little-endian 64-bit.
func blockRNG(seed uint64, key string, block int) wyrand {
	msg := fmt.Appendf(nil, "nvmai-synth-%d\x00", synthGenerator)
	msg = binary.LittleEndian.AppendUint64(msg, seed)
	msg = append(append(msg, key...), 0)
	msg = binary.LittleEndian.AppendUint64(msg, uint64(block))
	sum := sha256.Sum256(msg)
	return wyrand(binary.LittleEndian.Uint64(sum[:8]))
}

// fill writes span s's bytes into dst (len s.n, zeroed).
func (s *span) fill(dst []byte, seed uint64) {
	b := s.blob
	rng := blockRNG(seed, b.key, s.block)
	switch b.kind {
	case fillOne:
		fillF32(dst, func() float64 { return 1 })
	case fillCodes:
		for len(dst) >= 8 {
			binary.LittleEndian.PutUint64(dst, rng.next())
			dst = dst[8:]
		}
		for i, v := 0, rng.next(); i < len(dst); i++ {
			dst[i] = byte(v >> (8 * i))
		}
	case fillScales, fillBiases, fillHoleBiases:
		fillGroupParams(dst, &rng, b)
	case fillBF16:
		fillBF16Uniform(dst, &rng, b.param)
	case fillALog:
		fillF32(dst, func() float64 { return math.Log(1 + 15*rng.uniform()) })
	case fillUniform:
		fillF32(dst, func() float64 { return (2*rng.uniform() - 1) * b.param })
	}
}

func fillF32(dst []byte, v func() float64) {
	for i := 0; i+4 <= len(dst); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(float32(v())))
	}
}

// fillGroupParams writes scales s0·U(0.75, 1.25), s0 chosen so uniform
// codes give the blob's std, or the matching biases −scale·(2^bits−1)/2,
// which centre every group on zero, or (fillHoleBiases) ±scale·σ_code with
// the sign from the low bit of the draw, which uniform() discards. All
// draw the same numbers, so block k of the biases matches block k of the
// scales.
func fillGroupParams(dst []byte, rng *wyrand, b *blob) {
	levels := float64(int(1)<<b.bits - 1)
	codeStd := math.Sqrt(((levels+1)*(levels+1) - 1) / 12)
	s0 := b.param / codeStd
	for i := 0; i+2 <= len(dst); i += 2 {
		r := rng.next()
		u := float64(r>>11) * 0x1p-53 // rng.uniform() of this draw
		scale := quant.BF16ToF32(quant.F32ToBF16(float32(s0 * (0.75 + 0.5*u))))
		v := scale
		switch b.kind {
		case fillBiases:
			v = -scale * float32(levels) / 2
		case fillHoleBiases:
			v = scale * float32(codeStd)
			if r&1 == 1 {
				v = -v
			}
		}
		binary.LittleEndian.PutUint16(dst[i:], quant.F32ToBF16(v))
	}
}

// fillBF16Uniform writes U(−a, a) with a = √3·std, four values per draw.
func fillBF16Uniform(dst []byte, rng *wyrand, std float64) {
	a := float32(math.Sqrt(3) * std)
	var v uint64
	for i := 0; i+2 <= len(dst); i += 2 {
		if i%8 == 0 {
			v = rng.next()
		}
		u := (float32(uint16(v>>(8*(i%8)))) + 0.5) / 65536
		binary.LittleEndian.PutUint16(dst[i:], quant.F32ToBF16((2*u-1)*a))
	}
}

// writeSynthFiles creates files in dir and fills them: threads workers
// generate chunks, and one writer per file writes its chunks in order,
// hashing them as they go (the receipt needs every file's sha256, and
// reading the install back would double the I/O). Files are interleaved
// over several lanes so that as many files are written and hashed at once
// as there are threads. progress is called with each write's byte count,
// never concurrently. It returns each file's sha256 as lowercase hex.
func writeSynthFiles(ctx context.Context, dir string, files []*synthFile, seed uint64, threads int, progress func(n int64)) ([]string, error) {
	perFile := make([][]chunk, len(files))
	for i, f := range files {
		if !f.sparse {
			perFile[i] = f.chunks(i)
		}
	}
	lanes := max(1, min(threads, len(files)))
	order, seq := interleave(perFile, lanes)
	w := &synthWriter{
		dir: dir, files: files, seed: seed, order: order, seq: seq, progress: progress,
		results: make([]chan *[]byte, len(order)),
		tokens:  make(chan struct{}, 2*threads+lanes),
		jobs:    make(chan int),
		sums:    make([]string, len(files)),
	}
	w.pool.New = func() any { b := make([]byte, synthChunk+synthBlock); return &b }
	for i := range w.results {
		w.results[i] = make(chan *[]byte, 1)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.dispatch(ctx) })
	for range threads {
		g.Go(func() error { w.generate(ctx); return nil })
	}
	for i := range files {
		if files[i].sparse {
			g.Go(func() error { return w.writeSparse(ctx, i) })
			continue
		}
		g.Go(func() error { return w.write(ctx, i) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return w.sums, nil
}

// interleave orders every chunk for dispatch: lane l takes files l,
// l+lanes, …, and the lanes take turns, one chunk each. seq[f] lists file
// f's chunks as indexes into order, in file order.
func interleave(perFile [][]chunk, lanes int) (order []chunk, seq [][]int) {
	seq = make([][]int, len(perFile))
	type cursor struct {
		files []int
		f, c  int
	}
	cur := make([]cursor, lanes)
	for i := range perFile {
		cur[i%lanes].files = append(cur[i%lanes].files, i)
	}
	for more := true; more; {
		more = false
		for l := range cur {
			c := &cur[l]
			for c.f < len(c.files) && c.c == len(perFile[c.files[c.f]]) {
				c.f, c.c = c.f+1, 0
			}
			if c.f == len(c.files) {
				continue
			}
			fi := c.files[c.f]
			seq[fi] = append(seq[fi], len(order))
			order = append(order, perFile[fi][c.c])
			c.c++
			more = true
		}
	}
	return order, seq
}

type synthWriter struct {
	dir      string
	files    []*synthFile
	seed     uint64
	order    []chunk
	seq      [][]int
	results  []chan *[]byte // one per chunk, buffered: generated bytes
	tokens   chan struct{}  // bounds the chunks in flight
	jobs     chan int
	pool     sync.Pool
	mu       sync.Mutex
	progress func(int64)
	sums     []string
}

// dispatch hands out chunks in order, at most cap(tokens) in flight; since
// every file's chunks are dispatched in file order, the oldest chunk in
// flight can always be written, so the pipeline cannot stall.
func (w *synthWriter) dispatch(ctx context.Context) error {
	defer close(w.jobs)
	for i := range w.order {
		select {
		case w.tokens <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case w.jobs <- i:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (w *synthWriter) generate(ctx context.Context) {
	for i := range w.jobs {
		if ctx.Err() != nil {
			continue
		}
		c := &w.order[i]
		bp := w.pool.Get().(*[]byte)
		if cap(*bp) < c.n {
			b := make([]byte, c.n)
			bp = &b
		}
		buf := (*bp)[:c.n]
		clear(buf)
		for j := range c.spans {
			s := &c.spans[j]
			s.fill(buf[s.off-c.off:][:s.n], w.seed)
		}
		*bp = buf
		w.results[i] <- bp
	}
}

// writeSparse creates file fi as a hole of its full size and hashes the
// zeros it reads as, without writing a byte.
func (w *synthWriter) writeSparse(ctx context.Context, fi int) error {
	sf := w.files[fi]
	path := filepath.Join(w.dir, filepath.FromSlash(sf.name))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(sf.size); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	h := sha256.New()
	zeros := make([]byte, synthChunk)
	for left := sf.size; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(left, int64(len(zeros)))
		h.Write(zeros[:n])
		left -= n
		w.mu.Lock()
		w.progress(n)
		w.mu.Unlock()
	}
	w.sums[fi] = hex.EncodeToString(h.Sum(nil))
	return nil
}

// write creates file fi and writes its chunks in order, hashing each.
func (w *synthWriter) write(ctx context.Context, fi int) (err error) {
	sf := w.files[fi]
	path := filepath.Join(w.dir, filepath.FromSlash(sf.name))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%s: %w", path, cerr)
		}
	}()
	if sf.codeHoles {
		// Full size first: what writeSpans leaves out stays a hole.
		if err := f.Truncate(sf.size); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	h := sha256.New()
	var written int64
	for _, i := range w.seq[fi] {
		var bp *[]byte
		select {
		case bp = <-w.results[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		var werr error
		if sf.codeHoles {
			werr = writeSpans(f, *bp, &w.order[i])
		} else {
			_, werr = f.Write(*bp)
		}
		h.Write(*bp)
		n := int64(len(*bp))
		written += n
		w.pool.Put(bp)
		<-w.tokens
		if werr != nil {
			return fmt.Errorf("writing %s: %w", path, werr)
		}
		w.mu.Lock()
		w.progress(n)
		w.mu.Unlock()
	}
	if written != sf.size {
		return fmt.Errorf("internal error: wrote %d bytes of %s, planned %d", written, path, sf.size)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	w.sums[fi] = hex.EncodeToString(h.Sum(nil))
	return nil
}

// writeSpans writes only chunk c's spans of buf (adjacent spans in one
// write) at their file offsets, leaving the rest of the chunk, all zeros,
// as a hole.
func writeSpans(f *os.File, buf []byte, c *chunk) error {
	for j := 0; j < len(c.spans); {
		lo := c.spans[j].off
		hi := lo + int64(c.spans[j].n)
		for j++; j < len(c.spans) && c.spans[j].off == hi; j++ {
			hi += int64(c.spans[j].n)
		}
		if _, err := f.WriteAt(buf[lo-c.off:hi-c.off], lo); err != nil {
			return err
		}
	}
	return nil
}
