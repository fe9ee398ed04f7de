package qwen35

import (
	"fmt"
	"io"

	"github.com/nvmai/nvmai/internal/lecodec"
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
	cw := lecodec.NewWriter(w)
	cw.Raw(encodeStateHeader(s.model.codecHeader(s.kvBits, uint64(s.pos))))
	for _, ls := range s.layers {
		if ls.kv == nil {
			cw.F32s(ls.conv)
			cw.F32s(ls.rec)
			continue
		}
		ls.kv.WriteRows(cw, s.pos)
	}
	cw.Flush()
	return cw.N, cw.Err
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
	cr := lecodec.NewReader(r)
	for _, ls := range st.layers {
		if ls.kv == nil {
			cr.F32s(ls.conv)
			cr.F32s(ls.rec)
			continue
		}
		ls.kv.ReadRows(cr, pos)
	}
	if cr.Err != nil {
		return nil, fmt.Errorf("qwen35: reading a %d-token state: %w", pos, cr.Err)
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
	return lecodec.CheckKinds("qwen35", h.kinds, want.kinds)
}

// The header: "Q35S", version u32, layers u32, one kind byte per layer,
// kv bits u32, kv row u32, head dim u32, conv floats u32, rec floats u32,
// tokens u64.
var stateFormat = lecodec.StateFormat{
	Pkg: "qwen35", Name: "serialized state", Magic: [4]byte{'Q', '3', '5', 'S'},
	Version: StateCodecVersion, Dims: 5, MaxLayers: maxCodecLayers,
}

func encodeStateHeader(h stateHeader) []byte {
	return lecodec.EncodeStateHeader(stateFormat, lecodec.StateHeader[LayerKind]{Version: h.version, Kinds: h.kinds,
		Dims: []uint32{h.kvBits, h.kvRow, h.headDim, h.convLen, h.recLen}, Tokens: h.tokens})
}

func readStateHeader(r io.Reader) (stateHeader, error) {
	lh, err := lecodec.ReadStateHeader[LayerKind](stateFormat, r)
	if err != nil {
		return stateHeader{}, err
	}
	h := stateHeader{version: lh.Version, kinds: lh.Kinds, tokens: lh.Tokens}
	h.kvBits, h.kvRow, h.headDim, h.convLen, h.recLen = lh.Dims[0], lh.Dims[1], lh.Dims[2], lh.Dims[3], lh.Dims[4]
	return h, nil
}
