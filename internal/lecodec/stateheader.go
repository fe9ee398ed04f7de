package lecodec

import (
	"encoding/binary"
	"fmt"
	"io"
)

// StateFormat is the header layout the CPU engines' state codecs (qwen35,
// qwen38) share: Magic, version u32, layer count u32, one kind byte per
// layer, Dims geometry numbers u32, tokens u64. It names the format for the
// errors, so each model's messages stay its own.
type StateFormat struct {
	Pkg       string // error prefix, e.g. "qwen35"
	Name      string // what the magic opens, e.g. "serialized state"
	Magic     [4]byte
	Version   uint32 // the only version read
	Dims      int    // geometry numbers after the kinds
	MaxLayers uint32 // a hostile file must not make the reader allocate a huge kinds slice
}

// StateHeader is what a serialized state declares before its data, so a
// reader can refuse one of another geometry before allocating.
type StateHeader struct {
	Version uint32
	Kinds   []byte
	Dims    []uint32
	Tokens  uint64
}

// Encode is h in f's layout; h.Dims must hold f.Dims numbers.
func (f StateFormat) Encode(h StateHeader) []byte {
	b := append([]byte(nil), f.Magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, h.Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Kinds)))
	b = append(b, h.Kinds...)
	for _, v := range h.Dims {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return binary.LittleEndian.AppendUint64(b, h.Tokens)
}

// Read reads a header in f's layout, refusing another magic, another
// version, or no or too many layers.
func (f StateFormat) Read(r io.Reader) (StateHeader, error) {
	var h StateHeader
	var fixed [12]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return h, fmt.Errorf("%s: reading the state header: %w", f.Pkg, NoEOF(err))
	}
	if [4]byte(fixed[:4]) != f.Magic {
		return h, fmt.Errorf("%s: not a %s (magic %q, want %q)", f.Pkg, f.Name, fixed[:4], f.Magic[:])
	}
	h.Version = binary.LittleEndian.Uint32(fixed[4:])
	if h.Version != f.Version {
		return h, fmt.Errorf("%s: serialized state version %d; this build reads version %d", f.Pkg, h.Version, f.Version)
	}
	n := binary.LittleEndian.Uint32(fixed[8:])
	if n == 0 || n > f.MaxLayers {
		return h, fmt.Errorf("%s: the state declares %d layers (at most %d)", f.Pkg, n, f.MaxLayers)
	}
	rest := make([]byte, int(n)+f.Dims*4+8)
	if _, err := io.ReadFull(r, rest); err != nil {
		return h, fmt.Errorf("%s: reading the state header: %w", f.Pkg, NoEOF(err))
	}
	h.Kinds = rest[:n:n]
	v := rest[n:]
	h.Dims = make([]uint32, f.Dims)
	for i := range h.Dims {
		h.Dims[i] = binary.LittleEndian.Uint32(v[4*i:])
	}
	h.Tokens = binary.LittleEndian.Uint64(v[4*f.Dims:])
	return h, nil
}
