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
// reader can refuse one of another geometry before allocating. K is the
// model's layer kind, one byte on disk.
type StateHeader[K ~uint8] struct {
	Version uint32
	Kinds   []K
	Dims    []uint32
	Tokens  uint64
}

// EncodeStateHeader is h in f's layout; h.Dims must hold f.Dims numbers.
func EncodeStateHeader[K ~uint8](f StateFormat, h StateHeader[K]) []byte {
	b := append([]byte(nil), f.Magic[:]...)
	b = binary.LittleEndian.AppendUint32(b, h.Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Kinds)))
	for _, k := range h.Kinds {
		b = append(b, byte(k))
	}
	for _, v := range h.Dims {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return binary.LittleEndian.AppendUint64(b, h.Tokens)
}

// ReadStateHeader reads a header in f's layout, refusing another magic,
// another version, or no or too many layers.
func ReadStateHeader[K ~uint8](f StateFormat, r io.Reader) (StateHeader[K], error) {
	var h StateHeader[K]
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
	h.Kinds = make([]K, n)
	for i := range h.Kinds {
		h.Kinds[i] = K(rest[i])
	}
	v := rest[n:]
	h.Dims = make([]uint32, f.Dims)
	for i := range h.Dims {
		h.Dims[i] = binary.LittleEndian.Uint32(v[4*i:])
	}
	h.Tokens = binary.LittleEndian.Uint64(v[4*f.Dims:])
	return h, nil
}

// CheckKinds refuses a state whose layers, as many as the model's, are not
// of the model's kinds, naming the first that differs.
func CheckKinds[K ~uint8](pkg string, got, want []K) error {
	for i, k := range got {
		if k != want[i] {
			return fmt.Errorf("%s: layer %d of the state is %v, of this model %v", pkg, i, k, want[i])
		}
	}
	return nil
}
