package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// GGUF version 3 (ggml/include/gguf.h, docs/gguf.md of llama.cpp): magic,
// version, tensor count, key/value count, the key/values, the tensor infos,
// padding to the alignment, then the tensors' data, each padded to it.
const (
	ggufVersion   = 3
	ggufAlignment = 32
)

// gguf value types.
const (
	tUint8 uint32 = iota
	tInt8
	tUint16
	tInt16
	tUint32
	tInt32
	tFloat32
	tBool
	tString
	tArray
	tUint64
	tInt64
	tFloat64
)

// ggml tensor types and their blocks (ggml.h, ggml-common.h).
type ggmlType struct {
	name       string
	id         uint32
	block      int // values per block
	blockBytes int
}

var (
	typeF32  = ggmlType{"f32", 0, 1, 4}
	typeQ4_0 = ggmlType{"q4_0", 2, 32, q4BlockSize}
	typeQ8_0 = ggmlType{"q8_0", 8, 32, q8BlockSize}
)

// kv is one metadata entry; value is string, uint32, uint64, float32, bool,
// or a []string / []int32 / []bool array.
type kv struct {
	key   string
	value any
}

type ggufHeader struct{ bytes.Buffer }

func (h *ggufHeader) u32(v uint32) { binary.Write(&h.Buffer, binary.LittleEndian, v) }
func (h *ggufHeader) u64(v uint64) { binary.Write(&h.Buffer, binary.LittleEndian, v) }
func (h *ggufHeader) str(s string) { h.u64(uint64(len(s))); h.WriteString(s) }

func (h *ggufHeader) value(v any) error {
	switch x := v.(type) {
	case string:
		h.u32(tString)
		h.str(x)
	case uint32:
		h.u32(tUint32)
		h.u32(x)
	case uint64:
		h.u32(tUint64)
		h.u64(x)
	case float32:
		h.u32(tFloat32)
		h.u32(math.Float32bits(x))
	case bool:
		h.u32(tBool)
		h.WriteByte(boolByte(x))
	case []string:
		h.u32(tArray)
		h.u32(tString)
		h.u64(uint64(len(x)))
		for _, s := range x {
			h.str(s)
		}
	case []int32:
		h.u32(tArray)
		h.u32(tInt32)
		h.u64(uint64(len(x)))
		for _, i := range x {
			h.u32(uint32(i))
		}
	case []bool:
		h.u32(tArray)
		h.u32(tBool)
		h.u64(uint64(len(x)))
		for _, b := range x {
			h.WriteByte(boolByte(b))
		}
	default:
		return fmt.Errorf("gguf: no encoding for %T", v)
	}
	return nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// encodeHeader writes everything before the data, padded to the alignment.
func encodeHeader(kvs []kv, tensors []*tensor) ([]byte, error) {
	var h ggufHeader
	h.WriteString("GGUF")
	h.u32(ggufVersion)
	h.u64(uint64(len(tensors)))
	h.u64(uint64(len(kvs)))
	for _, e := range kvs {
		h.str(e.key)
		if err := h.value(e.value); err != nil {
			return nil, fmt.Errorf("%s: %w", e.key, err)
		}
	}
	for _, t := range tensors {
		h.str(t.name)
		h.u32(uint32(len(t.ne)))
		for _, d := range t.ne {
			h.u64(uint64(d))
		}
		h.u32(t.typ.id)
		h.u64(uint64(t.offset))
	}
	for h.Len()%ggufAlignment != 0 {
		h.WriteByte(0)
	}
	return h.Bytes(), nil
}

func alignUp(n int64) int64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }
