package qwen35

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// StateCodecVersion is the version of the layout WriteTo writes and
// ReadState reads (docs/prompt-cache.md, "The state section").
const StateCodecVersion = 1

// stateHeader is the geometry a serialized state declares, so that a
// reader can refuse one written by another model before allocating.
type stateHeader struct {
	version uint32
	kinds   []LayerKind
	kvBits  uint32
	kvRow   uint32 // Hkv·Dh
	headDim uint32
	convLen uint32 // floats of one GDN layer's conv window
	recLen  uint32 // floats of one GDN layer's recurrent matrices
	tokens  uint64
}

// maxCodecLayers bounds the layer count a header may declare before it is
// compared with the model (a hostile file must not make the reader
// allocate a huge kinds slice).
const maxCodecLayers = 1024

// WriteTo writes the sequence (its position, every GDN layer's conv window
// and recurrent matrices, every attention layer's first Len() K and V rows
// in the cache's width) in the layout ReadState reads. All numbers are
// little-endian; float32 and bfloat16 values are written as their bits, so a
// round trip is bitwise exact.
func (s *State) WriteTo(w io.Writer) (int64, error) {
	if s.failed != nil {
		return 0, fmt.Errorf("qwen35: cannot serialize a state whose last forward failed: %w", s.failed)
	}
	cw := &codecWriter{w: w, buf: make([]byte, 0, codecChunk)}
	h := s.model.codecHeader(s.kvBits, uint64(s.pos))
	cw.header(h)
	for _, ls := range s.layers {
		if ls.kv == nil {
			cw.f32s(ls.conv)
			cw.f32s(ls.rec)
			continue
		}
		cw.rows(&ls.kv.k, s.pos*ls.kv.row, kvGroup(ls.kv.dh))
		cw.rows(&ls.kv.v, s.pos*ls.kv.row, kvGroup(ls.kv.dh))
	}
	cw.flush()
	return cw.n, cw.err
}

// ReadState reads a state WriteTo wrote for this model. opts gives the
// session's KV width and max context: a state of another width or longer
// than the context is refused, as is one of another geometry. Memory is
// allocated only after the header matched, and is at most what a state of
// opts filled to the declared length holds.
func (m *Model) ReadState(r io.Reader, opts StateOptions) (*State, error) {
	h, err := readStateHeader(r)
	if err != nil {
		return nil, err
	}
	bits := opts.KVBits
	if bits == 0 {
		bits = KVFloat32
	}
	maxCtx := opts.MaxContext
	if maxCtx <= 0 {
		maxCtx = m.cfg.MaxContext
	}
	if err := m.checkCodecHeader(h, bits, maxCtx); err != nil {
		return nil, err
	}
	pos := int(h.tokens)
	st := m.NewState(StateOptions{KVInitial: max(pos, 1), MaxContext: maxCtx, KVBits: bits})
	cr := &codecReader{r: r, buf: make([]byte, codecChunk)}
	for _, ls := range st.layers {
		if ls.kv == nil {
			cr.f32s(ls.conv)
			cr.f32s(ls.rec)
			continue
		}
		cr.rows(&ls.kv.k, pos*ls.kv.row, kvGroup(ls.kv.dh))
		cr.rows(&ls.kv.v, pos*ls.kv.row, kvGroup(ls.kv.dh))
	}
	if cr.err != nil {
		return nil, fmt.Errorf("qwen35: reading a %d-token state: %w", pos, cr.err)
	}
	st.pos = pos
	return st, nil
}

func (m *Model) codecHeader(bits int, tokens uint64) stateHeader {
	c := m.cfg
	return stateHeader{
		version: StateCodecVersion, kinds: c.Layers, kvBits: uint32(bits),
		kvRow: uint32(c.kvDim()), headDim: uint32(c.HeadDim),
		convLen: uint32((c.ConvKernel - 1) * c.ConvChannels()),
		recLen:  uint32(c.LinearValueHeads * c.LinearKeyDim * c.LinearValueDim),
		tokens:  tokens,
	}
}

func (m *Model) checkCodecHeader(h stateHeader, bits, maxCtx int) error {
	want := m.codecHeader(bits, h.tokens)
	switch {
	case len(h.kinds) != len(want.kinds):
		return fmt.Errorf("qwen35: the state has %d layers, this model %d", len(h.kinds), len(want.kinds))
	case h.kvBits != want.kvBits:
		return fmt.Errorf("qwen35: the state's KV cache is %d-bit, this session's %d-bit", h.kvBits, want.kvBits)
	case h.kvRow != want.kvRow || h.headDim != want.headDim:
		return fmt.Errorf("qwen35: the state's KV rows are %d wide (heads of %d), this model's %d (heads of %d)", h.kvRow, h.headDim, want.kvRow, want.headDim)
	case h.convLen != want.convLen || h.recLen != want.recLen:
		return fmt.Errorf("qwen35: the state's Gated DeltaNet layers hold %d+%d floats, this model's %d+%d", h.convLen, h.recLen, want.convLen, want.recLen)
	case h.tokens > uint64(maxCtx):
		return fmt.Errorf("qwen35: the state holds %d tokens, more than the session's context of %d", h.tokens, maxCtx)
	}
	for i, k := range h.kinds {
		if k != want.kinds[i] {
			return fmt.Errorf("qwen35: layer %d of the state is %v, of this model %v", i, k, want.kinds[i])
		}
	}
	return nil
}

// The header: "Q35S", version u32, layers u32, one kind byte per layer,
// kv bits u32, kv row u32, head dim u32, conv floats u32, rec floats u32,
// tokens u64.
var stateMagic = [4]byte{'Q', '3', '5', 'S'}

func (cw *codecWriter) header(h stateHeader) {
	b := append([]byte(nil), stateMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, h.version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.kinds)))
	for _, k := range h.kinds {
		b = append(b, byte(k))
	}
	for _, v := range []uint32{h.kvBits, h.kvRow, h.headDim, h.convLen, h.recLen} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, h.tokens)
	cw.raw(b)
}

func readStateHeader(r io.Reader) (stateHeader, error) {
	var h stateHeader
	var fixed [12]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return h, fmt.Errorf("qwen35: reading the state header: %w", noEOF(err))
	}
	if [4]byte(fixed[:4]) != stateMagic {
		return h, fmt.Errorf("qwen35: not a serialized state (magic %q, want %q)", fixed[:4], stateMagic[:])
	}
	h.version = binary.LittleEndian.Uint32(fixed[4:])
	if h.version != StateCodecVersion {
		return h, fmt.Errorf("qwen35: serialized state version %d; this build reads version %d", h.version, StateCodecVersion)
	}
	n := binary.LittleEndian.Uint32(fixed[8:])
	if n == 0 || n > maxCodecLayers {
		return h, fmt.Errorf("qwen35: the state declares %d layers (at most %d)", n, maxCodecLayers)
	}
	rest := make([]byte, int(n)+5*4+8)
	if _, err := io.ReadFull(r, rest); err != nil {
		return h, fmt.Errorf("qwen35: reading the state header: %w", noEOF(err))
	}
	h.kinds = make([]LayerKind, n)
	for i := range h.kinds {
		h.kinds[i] = LayerKind(rest[i])
	}
	v := rest[n:]
	h.kvBits, h.kvRow, h.headDim = binary.LittleEndian.Uint32(v), binary.LittleEndian.Uint32(v[4:]), binary.LittleEndian.Uint32(v[8:])
	h.convLen, h.recLen = binary.LittleEndian.Uint32(v[12:]), binary.LittleEndian.Uint32(v[16:])
	h.tokens = binary.LittleEndian.Uint64(v[20:])
	return h, nil
}

// noEOF turns a clean EOF inside a structure into ErrUnexpectedEOF: a
// state cut anywhere is truncated.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// codecChunk is the staging buffer's size: values are converted to bytes
// this many at a time.
const codecChunk = 64 << 10

// codecWriter writes little-endian values through a staging buffer and
// keeps the first error.
type codecWriter struct {
	w   io.Writer
	buf []byte
	n   int64
	err error
}

func (cw *codecWriter) raw(b []byte) {
	if len(cw.buf)+len(b) > cap(cw.buf) {
		cw.flush()
	}
	if len(b) > cap(cw.buf) {
		cw.write(b)
		return
	}
	cw.buf = append(cw.buf, b...)
}

func (cw *codecWriter) flush() {
	cw.write(cw.buf)
	cw.buf = cw.buf[:0]
}

func (cw *codecWriter) write(b []byte) {
	if cw.err != nil || len(b) == 0 {
		return
	}
	n, err := cw.w.Write(b)
	cw.n += int64(n)
	cw.err = err
}

func (cw *codecWriter) room(n int) []byte {
	if len(cw.buf)+n > cap(cw.buf) {
		cw.flush()
	}
	return cw.buf
}

func (cw *codecWriter) f32s(x []float32) {
	for len(x) > 0 {
		k := min(len(x), codecChunk/4)
		b := cw.room(4 * k)
		for _, v := range x[:k] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		cw.buf, x = b, x[k:]
	}
}

func (cw *codecWriter) u16s(x []uint16) {
	for len(x) > 0 {
		k := min(len(x), codecChunk/2)
		b := cw.room(2 * k)
		for _, v := range x[:k] {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
		cw.buf, x = b, x[k:]
	}
}

func (cw *codecWriter) i8s(x []int8) {
	for len(x) > 0 {
		k := min(len(x), codecChunk)
		b := cw.room(k)
		for _, v := range x[:k] {
			b = append(b, byte(v))
		}
		cw.buf, x = b, x[k:]
	}
}

// rows writes the first n values of one cache (the written tokens' rows)
// and, for int8, their scales (one per group of values).
func (cw *codecWriter) rows(r *kvRows, n, group int) {
	switch {
	case r.f32 != nil:
		cw.f32s(r.f32[:n])
	case r.b16 != nil:
		cw.u16s(r.b16[:n])
	default:
		cw.i8s(r.q8[:n])
		cw.f32s(r.scales[:n/group])
	}
}

// codecReader is codecWriter's inverse.
type codecReader struct {
	r   io.Reader
	buf []byte
	err error
}

func (cr *codecReader) fill(n int) []byte {
	if cr.err != nil {
		return nil
	}
	if _, err := io.ReadFull(cr.r, cr.buf[:n]); err != nil {
		cr.err = noEOF(err)
		return nil
	}
	return cr.buf[:n]
}

func (cr *codecReader) f32s(x []float32) {
	for len(x) > 0 && cr.err == nil {
		k := min(len(x), codecChunk/4)
		if b := cr.fill(4 * k); b != nil {
			for i := range x[:k] {
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		}
		x = x[k:]
	}
}

func (cr *codecReader) u16s(x []uint16) {
	for len(x) > 0 && cr.err == nil {
		k := min(len(x), codecChunk/2)
		if b := cr.fill(2 * k); b != nil {
			for i := range x[:k] {
				x[i] = binary.LittleEndian.Uint16(b[2*i:])
			}
		}
		x = x[k:]
	}
}

func (cr *codecReader) i8s(x []int8) {
	for len(x) > 0 && cr.err == nil {
		k := min(len(x), codecChunk)
		if b := cr.fill(k); b != nil {
			for i := range x[:k] {
				x[i] = int8(b[i])
			}
		}
		x = x[k:]
	}
}

func (cr *codecReader) rows(r *kvRows, n, group int) {
	switch {
	case r.f32 != nil:
		cr.f32s(r.f32[:n])
	case r.b16 != nil:
		cr.u16s(r.b16[:n])
	default:
		cr.i8s(r.q8[:n])
		cr.f32s(r.scales[:n/group])
	}
}
