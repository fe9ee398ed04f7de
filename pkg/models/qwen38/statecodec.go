package qwen38

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/nvmai/nvmai/internal/lecodec"
	"github.com/nvmai/nvmai/pkg/model"
)

// StateCodecVersion is the version of the layout WriteTo writes and
// ReadState reads (docs/qwen38.md, "Snapshots").
const StateCodecVersion = 1

// stateHeader is the geometry a serialized state declares, so that a
// reader can refuse one written by another model or at another KV width
// before allocating.
type stateHeader struct {
	version uint32
	kinds   []LayerKind
	// kvBits, kvRow (Hkv·Dh), headDim, convLen and recLen (floats of one
	// GDN layer's conv window and recurrent matrices), indexerDim,
	// indexerBlock, pleLayers, pleConvLen (floats of one PLE conv window),
	// histLen (ids of one n-gram history), in this order on disk.
	dims   [10]uint32
	tokens uint64
}

// maxCodecLayers bounds the layer count a header may declare before it is
// compared with the model (a hostile file must not make the reader
// allocate a huge kinds slice).
const maxCodecLayers = 1024

var dimNames = [10]string{"KV width (bits)", "KV row", "head width", "GDN conv window", "GDN recurrent state",
	"indexer key width", "indexer block", "PLE layer count", "PLE conv window", "n-gram history"}

// WriteTo writes the sequence in the layout ReadState reads: the header,
// then per layer in order a GDN layer's conv window and recurrent matrices,
// or an attention layer's first Len() K and V rows in the cache's width,
// its raw indexer keys and its block keys; then per PLE layer its n-gram
// history (u32 ids) and conv window. All numbers are little-endian, floats
// and bfloat16 values as their bits, so a round trip is bitwise exact.
func (s *State) WriteTo(w io.Writer) (int64, error) {
	if s.failed != nil {
		return 0, fmt.Errorf("qwen38: cannot serialize a state whose last forward failed: %w", s.failed)
	}
	cw := lecodec.NewWriter(w)
	cw.Raw(encodeStateHeader(s.model.codecHeader(s.kvBits, uint64(s.pos))))
	for _, ls := range s.layers {
		if ls.attn.kv == nil {
			cw.F32s(ls.conv)
			cw.F32s(ls.rec)
			continue
		}
		ls.attn.kv.WriteRows(cw, s.pos)
		cw.F32s(ls.attn.kraw)
		cw.F32s(ls.attn.kb)
	}
	for _, p := range s.ple {
		hist := make([]byte, 0, 4*len(p.hist))
		for _, id := range p.hist {
			hist = binary.LittleEndian.AppendUint32(hist, uint32(id))
		}
		cw.Raw(hist)
		cw.F32s(p.conv)
	}
	cw.Flush()
	return cw.N, cw.Err
}

// ReadState reads a state WriteTo wrote for this model. opts gives the
// session's KV width (0: float32) and max context: a state of another
// width, longer than the context or of another geometry is refused, with
// what differs. Memory is allocated only after the header matched, and is
// at most what a state of opts filled to the declared length holds.
func (m *Model) ReadState(r io.Reader, opts StateOptions) (*State, error) {
	h, err := readStateHeader(r)
	if err != nil {
		return nil, err
	}
	bits, maxCtx := m.stateDefaults(opts)
	if err := m.checkCodecHeader(h, bits, maxCtx); err != nil {
		return nil, err
	}
	pos := int(h.tokens)
	st := m.NewState(StateOptions{KVInitial: max(pos, 1), MaxContext: maxCtx, KVBits: bits})
	c := &m.cfg
	cr := lecodec.NewReader(r)
	for i := range st.layers {
		ls := &st.layers[i]
		if ls.attn.kv == nil {
			cr.F32s(ls.conv)
			cr.F32s(ls.rec)
			continue
		}
		ls.attn.kv.ReadRows(cr, pos)
		ls.attn.kraw = ls.attn.kraw[:pos*c.IndexerDim]
		ls.attn.kb = ls.attn.kb[:pos/c.IndexerBlock*c.IndexerDim]
		cr.F32s(ls.attn.kraw)
		cr.F32s(ls.attn.kb)
	}
	if cr.Err != nil {
		return nil, fmt.Errorf("qwen38: reading a %d-token state: %w", pos, cr.Err)
	}
	for k := range st.ple {
		raw := make([]byte, 4*len(st.ple[k].hist))
		if _, err := io.ReadFull(r, raw); err != nil {
			return nil, fmt.Errorf("qwen38: reading PLE layer %d's n-gram history: %w", k, lecodec.NoEOF(err))
		}
		for i := range st.ple[k].hist {
			id := binary.LittleEndian.Uint32(raw[4*i:])
			if id >= uint32(c.VocabSize) {
				return nil, fmt.Errorf("qwen38: PLE layer %d's n-gram history holds token %d, outside the vocabulary of %d", k, id, c.VocabSize)
			}
			st.ple[k].hist[i] = int(id)
		}
		cr.F32s(st.ple[k].conv)
		if cr.Err != nil {
			return nil, fmt.Errorf("qwen38: reading PLE layer %d's conv window: %w", k, cr.Err)
		}
	}
	st.pos = pos
	return st, nil
}

// stateDefaults is the KV width and max context NewState gives opts.
func (m *Model) stateDefaults(opts StateOptions) (bits, maxContext int) {
	bits, maxContext = opts.KVBits, opts.MaxContext
	if bits == 0 {
		bits = model.KVFloat32
	}
	if maxContext <= 0 {
		maxContext = m.cfg.MaxContext
	}
	return bits, maxContext
}

func (m *Model) codecHeader(bits int, tokens uint64) stateHeader {
	c := m.cfg
	return stateHeader{
		version: StateCodecVersion, kinds: c.Layers, tokens: tokens,
		dims: [10]uint32{uint32(bits), uint32(c.kvDim()), uint32(c.HeadDim),
			uint32((c.ConvKernel - 1) * c.ConvChannels()), uint32(c.LinearValueHeads * c.LinearKeyDim * c.LinearValueDim),
			uint32(c.IndexerDim), uint32(c.IndexerBlock), uint32(len(c.PLELayers)),
			uint32((c.PLEConvKernel - 1) * c.NgramSize * c.StreamWidth()), uint32(c.NgramSize - 1)},
	}
}

func (m *Model) checkCodecHeader(h stateHeader, bits, maxCtx int) error {
	want := m.codecHeader(bits, h.tokens)
	if len(h.kinds) != len(want.kinds) {
		return fmt.Errorf("qwen38: the state has %d layers, this model %d", len(h.kinds), len(want.kinds))
	}
	if h.dims[0] != want.dims[0] {
		return fmt.Errorf("qwen38: the state's KV cache is %d-bit, this session's %d-bit; run with --kv-bits %d to use it, or let it be rebuilt", h.dims[0], want.dims[0], h.dims[0])
	}
	for i := 1; i < len(h.dims); i++ {
		if h.dims[i] != want.dims[i] {
			return fmt.Errorf("qwen38: the state's %s is %d, this model's %d", dimNames[i], h.dims[i], want.dims[i])
		}
	}
	if h.tokens > uint64(maxCtx) {
		return fmt.Errorf("qwen38: the state holds %d tokens, more than the session's context of %d", h.tokens, maxCtx)
	}
	return lecodec.CheckKinds("qwen38", h.kinds, want.kinds)
}

// The header: "Q38S", version u32, layers u32, one kind byte per layer,
// the ten dims u32, tokens u64.
var stateFormat = lecodec.StateFormat{
	Pkg: "qwen38", Name: "serialized qwen38 state", Magic: [4]byte{'Q', '3', '8', 'S'},
	Version: StateCodecVersion, Dims: 10, MaxLayers: maxCodecLayers,
}

func encodeStateHeader(h stateHeader) []byte {
	return lecodec.EncodeStateHeader(stateFormat, lecodec.StateHeader[LayerKind]{Version: h.version, Kinds: h.kinds, Dims: h.dims[:], Tokens: h.tokens})
}

func readStateHeader(r io.Reader) (stateHeader, error) {
	lh, err := lecodec.ReadStateHeader[LayerKind](stateFormat, r)
	if err != nil {
		return stateHeader{}, err
	}
	h := stateHeader{version: lh.Version, kinds: lh.Kinds, tokens: lh.Tokens}
	copy(h.dims[:], lh.Dims)
	return h, nil
}
