package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// ggufTensor is one tensor's entry in a GGUF header.
type ggufTensor struct {
	Name  string
	Dims  []uint64 // ne[0] is the row length
	Type  uint32
	Bytes int64
}

// ggmlBlock is a ggml type's block: elements per block and bytes per block.
type ggmlBlock struct{ elems, bytes int64 }

// ggmlBlocks covers the types a GGUF of this project (ggufsynth) or a common
// llama.cpp quantization holds; an unknown type is an error naming the tensor.
var ggmlBlocks = map[uint32]ggmlBlock{
	0: {1, 4}, 1: {1, 2}, 2: {32, 18}, 3: {32, 20}, 6: {32, 22}, 7: {32, 24}, 8: {32, 34}, 9: {32, 36},
	10: {256, 84}, 11: {256, 110}, 12: {256, 144}, 13: {256, 176}, 14: {256, 210}, 15: {256, 292},
	24: {1, 1}, 25: {1, 2}, 26: {1, 4}, 27: {1, 8}, 28: {1, 8}, 30: {1, 2},
}

// ggufHeader is what the bytes-per-token estimate needs from a GGUF: its
// integer metadata and its tensors.
type ggufHeader struct {
	Ints    map[string]uint64
	Tensors []ggufTensor
}

// readGGUFHeader reads the metadata and tensor infos of a GGUF (versions 2
// and 3), never the tensor data.
func readGGUFHeader(path string) (*ggufHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := parseGGUFHeader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (is it a GGUF that ggufsynth or llama.cpp wrote, and complete?)", path, err)
	}
	return h, nil
}

type ggufReader struct {
	r   io.Reader
	off int64
	err error
}

func (g *ggufReader) read(n int) []byte {
	if g.err != nil {
		return make([]byte, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(g.r, b); err != nil {
		g.err = fmt.Errorf("truncated header at offset %d: %w", g.off, err)
	}
	g.off += int64(n)
	return b
}

func (g *ggufReader) u32() uint32 { return binary.LittleEndian.Uint32(g.read(4)) }
func (g *ggufReader) u64() uint64 { return binary.LittleEndian.Uint64(g.read(8)) }

func (g *ggufReader) str() string {
	n := g.u64()
	if g.err == nil && n > 1<<20 {
		g.err = fmt.Errorf("string of %d bytes at offset %d", n, g.off-8)
		return ""
	}
	return string(g.read(int(n)))
}

// value reads one metadata value of type t; integers come back as uint64
// (ok true), everything else is skipped.
func (g *ggufReader) value(t uint32, depth int) (uint64, bool) {
	switch t {
	case 0, 1:
		return uint64(g.read(1)[0]), true
	case 2, 3:
		return uint64(binary.LittleEndian.Uint16(g.read(2))), true
	case 4, 5:
		return uint64(g.u32()), true
	case 6:
		g.read(4)
	case 7:
		g.read(1)
	case 8:
		g.str()
	case 9:
		et, n := g.u32(), g.u64()
		if depth > 2 || n > 1<<26 {
			g.err = fmt.Errorf("array of %d elements at offset %d", n, g.off-8)
			return 0, false
		}
		for i := uint64(0); i < n && g.err == nil; i++ {
			g.value(et, depth+1)
		}
	case 10, 11:
		return g.u64(), true
	case 12:
		g.read(8)
	default:
		g.err = fmt.Errorf("metadata type %d at offset %d", t, g.off-4)
	}
	return 0, false
}

func parseGGUFHeader(r io.Reader) (*ggufHeader, error) {
	g := &ggufReader{r: r}
	if magic := string(g.read(4)); g.err == nil && magic != "GGUF" {
		return nil, fmt.Errorf("magic %q, want \"GGUF\"", magic)
	}
	if v := g.u32(); g.err == nil && v != 2 && v != 3 {
		return nil, fmt.Errorf("GGUF version %d, want 2 or 3", v)
	}
	nt, nkv := g.u64(), g.u64()
	if g.err == nil && (nt > 1<<20 || nkv > 1<<20) {
		return nil, fmt.Errorf("%d tensors, %d metadata entries: not a plausible header", nt, nkv)
	}
	h := &ggufHeader{Ints: map[string]uint64{}}
	for i := uint64(0); i < nkv && g.err == nil; i++ {
		key := g.str()
		if v, ok := g.value(g.u32(), 0); ok {
			h.Ints[key] = v
		}
	}
	for i := uint64(0); i < nt && g.err == nil; i++ {
		t := ggufTensor{Name: g.str()}
		nd := g.u32()
		if nd > 4 {
			return nil, fmt.Errorf("tensor %q has %d dimensions", t.Name, nd)
		}
		elems := uint64(1)
		for range nd {
			d := g.u64()
			t.Dims = append(t.Dims, d)
			elems *= d
		}
		t.Type = g.u32()
		g.u64() // offset
		if g.err != nil {
			break
		}
		blk, ok := ggmlBlocks[t.Type]
		if !ok {
			return nil, fmt.Errorf("tensor %q has ggml type %d, which this estimate does not know", t.Name, t.Type)
		}
		if elems > math.MaxInt64/uint64(blk.bytes) || int64(elems)%blk.elems != 0 {
			return nil, fmt.Errorf("tensor %q: %d elements do not fill whole blocks of %d", t.Name, elems, blk.elems)
		}
		t.Bytes = int64(elems) / blk.elems * blk.bytes
		h.Tensors = append(h.Tensors, t)
	}
	if g.err != nil {
		return nil, g.err
	}
	return h, nil
}

// decodeBytesPerToken is what llama.cpp reads of the weights per decode
// step: every tensor whole, but the routed experts (*_exps) at used/count of
// their bytes and token_embd at one row (the whole of it when there is no
// output tensor, since the head then reads it).
func (h *ggufHeader) decodeBytesPerToken() (int64, error) {
	arch := ""
	for k := range h.Ints {
		if a, ok := strings.CutSuffix(k, ".expert_used_count"); ok {
			arch = a
		}
	}
	used, count := h.Ints[arch+".expert_used_count"], h.Ints[arch+".expert_count"]
	hasOutput := false
	for _, t := range h.Tensors {
		hasOutput = hasOutput || t.Name == "output.weight"
	}
	var total int64
	for _, t := range h.Tensors {
		switch {
		case strings.Contains(t.Name, "_exps"):
			if used == 0 || count == 0 {
				return 0, fmt.Errorf("tensor %q is a routed expert tensor but the header has no <arch>.expert_used_count / expert_count", t.Name)
			}
			total += t.Bytes * int64(used) / int64(count)
		case t.Name == "token_embd.weight" && hasOutput && len(t.Dims) == 2 && t.Dims[1] > 0:
			total += t.Bytes / int64(t.Dims[1])
		default:
			total += t.Bytes
		}
	}
	return total, nil
}
