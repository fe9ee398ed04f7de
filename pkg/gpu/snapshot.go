package gpu

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/nvmai/nvmai/internal/lecodec"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// A sequence's state between two Forward calls is its position (host and
// device copies), each Gated DeltaNet layer's conv window and recurrent
// matrices, each attention layer's K and V rows [0, pos), and the last
// row's logits and greedy pick. K and V are copied in the cache's width
// (float32, bfloat16, or int8 values with their scales), so a snapshot
// restores only into a sequence of the same width. Everything else on the device is scratch a
// forward pass rewrites before reading, or a cache keyed by its own
// content (the sampling counts remember the history they hold and recount
// for any other), so a State restored from a Snapshot continues exactly as
// the State it was taken from: the same tokens, the same bits.
//
// The KV cache's capacity is not part of the state: the kernels take it
// as a row stride only, so the results do not depend on it. Restore grows
// the cache when the snapshot needs more rows, which drops the captured
// decode graph (allocKV); otherwise the graph's buffers and capacity are
// unchanged and it stays valid, the position being read from device
// memory at every replay.

var (
	_ model.Snapshotter    = (*State)(nil)
	_ model.SnapshotReader = (*State)(nil)
	_ io.WriterTo          = (*Snapshot)(nil)
)

// SnapshotVersion is the version of the layout Snapshot.WriteTo writes
// and ReadSnapshot reads (docs/gpu.md, "State snapshots").
// Version 2 added the KV width; version 1 (float32 KV) is still read.
const SnapshotVersion = 2

// snapshotMagic opens a serialized GPU state. It differs from the CPU
// engine's ("Q35S"): the engines round differently, so neither resumes the
// other's state.
var snapshotMagic = [4]byte{'N', 'G', 'P', 'S'}

// maxSnapshotLayers bounds the layer count a header may declare.
const maxSnapshotLayers = 1024

// snapLayout is what sizes a snapshot's arrays: the model's layer kinds
// and widths, and the state's KV width. It is the geometry a serialized
// snapshot declares and is checked against before anything is allocated.
type snapLayout struct {
	kinds    []qwen35.LayerKind
	kvRow    int // values of one token's K (or V) row in one layer: Hkv·Dh
	kvBits   int // the KV cache's width: 32, 16 or 8
	kvScales int // 8 bits: scales of one row (Hkv·Dh / group); else 0
	convLen  int // floats of one GDN layer's conv window: (K−1)·C
	recLen   int // floats of one GDN layer's recurrent matrices: Hv·Dk·Dv
	vocab    int // floats of the logits row
}

func (m *Model) snapLayout(kvBits int) snapLayout {
	g := m.geom
	lay := snapLayout{kinds: m.cfg.Layers, kvRow: g.kvd, kvBits: kvBits, convLen: (g.K - 1) * g.C,
		recLen: g.gdn.Hv * g.gdn.Dk * g.gdn.Dv, vocab: g.V}
	if kvBits == model.KVInt8 {
		lay.kvScales = g.kvd / gpukernels.KVGroup(g.attn.Dh)
	}
	return lay
}

// kvHost is one layer's K (or V) rows [0, pos) in host memory, in the
// cache's width: exactly one of f32, b16, q8 is set, and scales with q8.
type kvHost struct {
	f32    []float32
	b16    []uint16
	q8     []int8
	scales []float32
}

func newKVHost(lay snapLayout, pos int) kvHost {
	n := pos * lay.kvRow
	switch lay.kvBits {
	case model.KVBF16:
		return kvHost{b16: make([]uint16, n)}
	case model.KVInt8:
		return kvHost{q8: make([]int8, n), scales: make([]float32, pos*lay.kvScales)}
	}
	return kvHost{f32: make([]float32, n)}
}

// values is the rows' values as bytes (what the device cache holds).
func (h *kvHost) values() []byte {
	switch {
	case h.b16 != nil:
		return cuda.Bytes(h.b16)
	case h.q8 != nil:
		return cuda.Bytes(h.q8)
	}
	return cuda.Bytes(h.f32)
}

func (h *kvHost) bytes() int64 {
	return 4*int64(len(h.f32)) + 2*int64(len(h.b16)) + int64(len(h.q8)) + 4*int64(len(h.scales))
}

// write writes the values, then the scales of an int8 cache.
func (h *kvHost) write(sw *lecodec.Writer) {
	switch {
	case h.b16 != nil:
		sw.U16s(h.b16)
	case h.q8 != nil:
		sw.I8s(h.q8)
		sw.F32s(h.scales)
	default:
		sw.F32s(h.f32)
	}
}

func (h *kvHost) read(sr *lecodec.Reader) {
	switch {
	case h.b16 != nil:
		sr.U16s(h.b16)
	case h.q8 != nil:
		sr.I8s(h.q8)
		sr.F32s(h.scales)
	default:
		sr.F32s(h.f32)
	}
}

// kvWidthError is the refusal of a snapshot whose KV width is not the
// sequence's.
func kvWidthError(snap, seq int) error {
	return fmt.Errorf("gpu: the snapshot's KV cache is %d-bit, this sequence's %d-bit: a snapshot resumes only a sequence of its KV width (--kv-bits)", snap, seq)
}

// Snapshot is a copy of a State in host memory (plain Go memory). It is
// never changed once made, so WriteTo may run while a State restores from
// it.
type Snapshot struct {
	m         *Model // the model it belongs to (Restore refuses another's)
	lay       snapLayout
	pos       int
	next      int32       // the greedy pick of the last row (−1: a NaN)
	conv, rec [][]float32 // per layer; nil for attention layers
	k, v      []kvHost    // per layer, pos rows; empty for GDN layers
	logits    []float32   // the last row
}

// Len is the number of tokens the snapshot holds.
func (sn *Snapshot) Len() int { return sn.pos }

// KVBits is the width of the snapshot's K and V rows.
func (sn *Snapshot) KVBits() int { return sn.lay.kvBits }

// Bytes is the host memory the snapshot holds.
func (sn *Snapshot) Bytes() int64 {
	n := 4 * int64(len(sn.logits))
	for l := range sn.lay.kinds {
		n += 4*int64(len(sn.conv[l])+len(sn.rec[l])) + sn.k[l].bytes() + sn.v[l].bytes()
	}
	return n + 64
}

func newSnapshot(lay snapLayout, pos int) *Snapshot {
	n := len(lay.kinds)
	return &Snapshot{lay: lay, pos: pos, conv: make([][]float32, n), rec: make([][]float32, n),
		k: make([]kvHost, n), v: make([]kvHost, n)}
}

// Snapshot implements model.Snapshotter: it copies the state to host
// memory.
func (st *State) Snapshot() (model.Snapshot, error) {
	if st.failed != nil {
		return nil, fmt.Errorf("gpu: cannot snapshot a sequence whose last forward failed: %w", st.failed)
	}
	lay := st.m.snapLayout(st.kvBits)
	sn := newSnapshot(lay, st.pos)
	sn.m = st.m
	sn.logits = make([]float32, lay.vocab)
	var dev [2]int32 // the device's position and greedy pick
	err := st.m.dev.Do(func(c *cuda.Ctx) error {
		if err := c.DtoH(cuda.Bytes(dev[:1]), st.dpos); err != nil {
			return err
		}
		if err := c.DtoH(cuda.Bytes(dev[1:]), st.next); err != nil {
			return err
		}
		if err := c.DtoH(cuda.Bytes(sn.logits), st.s.logits); err != nil {
			return err
		}
		for l, kind := range lay.kinds {
			if kind == qwen35.LinearAttention {
				sn.conv[l], sn.rec[l] = make([]float32, lay.convLen), make([]float32, lay.recLen)
				if err := c.DtoH(cuda.Bytes(sn.conv[l]), st.conv[l]); err != nil {
					return err
				}
				if err := c.DtoH(cuda.Bytes(sn.rec[l]), st.rec[l]); err != nil {
					return err
				}
				continue
			}
			// Rows [0, pos) are the cache's first pos rows of values and
			// of scales.
			sn.k[l], sn.v[l] = newKVHost(lay, st.pos), newKVHost(lay, st.pos)
			kv := st.kv[l]
			for _, cp := range []struct {
				dst []byte
				src cuda.DevicePtr
			}{{sn.k[l].values(), kv.K}, {sn.v[l].values(), kv.V}, {cuda.Bytes(sn.k[l].scales), kv.KS}, {cuda.Bytes(sn.v[l].scales), kv.VS}} {
				if len(cp.dst) == 0 {
					continue
				}
				if err := c.DtoH(cp.dst, cp.src); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gpu: copying a %d-token sequence to host memory: %w", st.pos, err)
	}
	if int(dev[0]) != st.pos {
		return nil, fmt.Errorf("gpu: the sequence's device position is %d, its host position %d; it cannot be copied", dev[0], st.pos)
	}
	sn.next = dev[1]
	return sn, nil
}

// Restore implements model.Snapshotter: the state becomes the one sn was
// taken from. The KV cache grows to hold it (a cache already larger is
// kept, and so is the decode graph captured for it).
func (st *State) Restore(s model.Snapshot) error {
	sn, ok := s.(*Snapshot)
	if !ok || sn == nil {
		return fmt.Errorf("gpu: the snapshot (%T) does not come from a GPU session", s)
	}
	if sn.m != st.m {
		return fmt.Errorf("gpu: the snapshot comes from another model")
	}
	if sn.lay.kvBits != st.kvBits {
		return kvWidthError(sn.lay.kvBits, st.kvBits)
	}
	if sn.pos > st.maxCtx {
		return fmt.Errorf("gpu: the snapshot holds %d tokens, more than the sequence's context of %d", sn.pos, st.maxCtx)
	}
	pos := []int32{int32(sn.pos), sn.next}
	err := st.m.dev.Do(func(c *cuda.Ctx) error {
		if st.failed != nil && st.graph != nil {
			// A failed Forward may have replaced some caches (allocKV stops
			// at the first allocation that fails): capture afresh.
			c.DestroyGraph(st.graph)
			st.graph = nil
		}
		if sn.pos > st.kcap {
			capacity := max(st.kcap, 1)
			for capacity < sn.pos {
				capacity *= 2
			}
			if err := st.allocKV(c, min(capacity, st.maxCtx), 0); err != nil {
				return err
			}
		}
		// Asynchronous copies from Go memory the snapshot never changes,
		// then one wait: the driver stages pageable memory itself.
		copies := []hostCopy{{st.dpos, cuda.Bytes(pos[:1])}, {st.next, cuda.Bytes(pos[1:])}, {st.s.logits, cuda.Bytes(sn.logits)}}
		for l, kind := range sn.lay.kinds {
			if kind == qwen35.LinearAttention {
				copies = append(copies, hostCopy{st.conv[l], cuda.Bytes(sn.conv[l])}, hostCopy{st.rec[l], cuda.Bytes(sn.rec[l])})
			} else {
				kv := st.kv[l]
				copies = append(copies, hostCopy{kv.K, sn.k[l].values()}, hostCopy{kv.V, sn.v[l].values()},
					hostCopy{kv.KS, cuda.Bytes(sn.k[l].scales)}, hostCopy{kv.VS, cuda.Bytes(sn.v[l].scales)})
			}
		}
		for _, cp := range copies {
			if len(cp.src) == 0 {
				continue
			}
			if err := c.HtoDAsync(cp.dst, cp.src); err != nil {
				return err
			}
		}
		return c.Sync()
	})
	if err != nil {
		st.failed = err
		return fmt.Errorf("gpu: restoring a %d-token snapshot: %w", sn.pos, err)
	}
	st.pos, st.failed = sn.pos, nil
	return nil
}

// hostCopy is one copy of Restore's, from host memory to the device.
type hostCopy struct {
	dst cuda.DevicePtr
	src []byte
}

// ReadSnapshot implements model.SnapshotReader: it reads a snapshot that
// Snapshot.WriteTo wrote for this model, refusing one of another geometry
// or KV width, or longer than this sequence's context, before allocating
// its arrays.
func (st *State) ReadSnapshot(r io.Reader) (model.Snapshot, error) {
	sn, err := readSnapshot(r, st.m.snapLayout(st.kvBits), st.maxCtx)
	if err != nil {
		return nil, err
	}
	sn.m = st.m
	return sn, nil
}

// snapHeaderFixed is the header's length before the layer kinds: magic,
// version, layer count.
const snapHeaderFixed = 12

// snapHeaderTail is the header's length after the layer kinds: KV row
// values, KV bits, conv and recurrent floats, vocabulary (u32 each),
// position (u64), greedy pick (i32). Version 1 had no KV bits.
const snapHeaderTail = 5*4 + 8 + 4

// WriteTo writes the snapshot: "NGPS", version u32 (2), layer count u32,
// one kind byte per layer (0 Gated DeltaNet, 1 attention), KV row values
// u32, KV bits u32 (32, 16 or 8), conv floats u32, recurrent floats u32,
// vocabulary u32, position u64, greedy pick i32; then per layer in order
// its conv window and recurrent matrices, or its K rows then V rows
// [0, position) in the KV width (float32; bfloat16 as u16; int8 values then
// their float32 scales, one per group of a row, as the CPU engine's
// state section lays them out); then the logits row. Numbers are
// little-endian and floats are written as their bits, so a round trip is
// exact.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	lay := sn.lay
	b := append([]byte(nil), snapshotMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, SnapshotVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(lay.kinds)))
	for _, k := range lay.kinds {
		b = append(b, byte(k))
	}
	for _, v := range []int{lay.kvRow, lay.kvBits, lay.convLen, lay.recLen, lay.vocab} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(sn.pos))
	b = binary.LittleEndian.AppendUint32(b, uint32(sn.next))
	sw := lecodec.NewWriter(w)
	sw.Raw(b)
	for l, kind := range lay.kinds {
		if kind == qwen35.LinearAttention {
			sw.F32s(sn.conv[l])
			sw.F32s(sn.rec[l])
		} else {
			sn.k[l].write(sw)
			sn.v[l].write(sw)
		}
	}
	sw.F32s(sn.logits)
	sw.Flush()
	return sw.N, sw.Err
}

// readSnapshot reads a snapshot of layout lay holding at most maxCtx
// tokens. Every length is checked against lay before anything is
// allocated, and each array is allocated only when its turn comes, so a
// truncated or hostile input allocates at most one array past what it
// holds, and never more than a state of lay filled to maxCtx.
func readSnapshot(r io.Reader, lay snapLayout, maxCtx int) (*Snapshot, error) {
	var fixed [snapHeaderFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, fmt.Errorf("gpu: reading the snapshot header: %w", lecodec.NoEOF(err))
	}
	if [4]byte(fixed[:4]) != snapshotMagic {
		return nil, fmt.Errorf("gpu: not a GPU engine snapshot (magic %q, want %q); it was written by another engine or is damaged", fixed[:4], snapshotMagic[:])
	}
	version := binary.LittleEndian.Uint32(fixed[4:])
	if version != 1 && version != SnapshotVersion {
		return nil, fmt.Errorf("gpu: snapshot version %d; this build reads versions 1 and %d", version, SnapshotVersion)
	}
	layers := binary.LittleEndian.Uint32(fixed[8:])
	if layers > maxSnapshotLayers || int(layers) != len(lay.kinds) {
		return nil, fmt.Errorf("gpu: the snapshot has %d layers, this model %d: it was written for another model", layers, len(lay.kinds))
	}
	tail := snapHeaderTail
	if version == 1 {
		tail -= 4
	}
	rest := make([]byte, int(layers)+tail)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("gpu: reading the snapshot header: %w", lecodec.NoEOF(err))
	}
	for l, k := range lay.kinds {
		if got := qwen35.LayerKind(rest[l]); got != k {
			return nil, fmt.Errorf("gpu: layer %d of the snapshot is %v, of this model %v: it was written for another model", l, got, k)
		}
	}
	h := rest[layers:]
	u32 := func(i int) int { return int(binary.LittleEndian.Uint32(h[4*i:])) }
	kvBits := model.KVFloat32 // version 1
	if version != 1 {
		// The rest of the tail as version 1 lays it out, without the bits.
		kvBits, h = u32(1), append(h[:4:4], h[8:]...)
	}
	switch kvRow, conv, rec, vocab := u32(0), u32(1), u32(2), u32(3); {
	case kvRow != lay.kvRow:
		return nil, fmt.Errorf("gpu: the snapshot's KV rows hold %d floats, this model's %d: it was written for another model", kvRow, lay.kvRow)
	case conv != lay.convLen || rec != lay.recLen:
		return nil, fmt.Errorf("gpu: the snapshot's Gated DeltaNet layers hold %d+%d floats, this model's %d+%d: it was written for another model", conv, rec, lay.convLen, lay.recLen)
	case vocab != lay.vocab:
		return nil, fmt.Errorf("gpu: the snapshot's logits row holds %d floats, this model's vocabulary %d: it was written for another model", vocab, lay.vocab)
	case kvBits != lay.kvBits:
		if !model.ValidKVBits(kvBits) {
			return nil, fmt.Errorf("gpu: the snapshot's KV width is %d bits; a snapshot holds 8, 16 or 32", kvBits)
		}
		return nil, kvWidthError(kvBits, lay.kvBits)
	}
	pos := binary.LittleEndian.Uint64(h[16:])
	if pos > uint64(maxCtx) {
		return nil, fmt.Errorf("gpu: the snapshot holds %d tokens, more than the sequence's context of %d", pos, maxCtx)
	}
	next := int32(binary.LittleEndian.Uint32(h[24:]))
	if next < -1 || int(next) >= lay.vocab {
		return nil, fmt.Errorf("gpu: the snapshot's greedy pick %d is outside the vocabulary of %d", next, lay.vocab)
	}
	sn := newSnapshot(lay, int(pos))
	sn.next = next
	sr := lecodec.NewReader(r)
	floats := func(n int) []float32 {
		if sr.Err != nil {
			return nil // allocate nothing past a short input
		}
		x := make([]float32, n)
		sr.F32s(x)
		return x
	}
	for l, kind := range lay.kinds {
		if kind == qwen35.LinearAttention {
			sn.conv[l] = floats(lay.convLen)
			sn.rec[l] = floats(lay.recLen)
		} else {
			for _, kv := range []*kvHost{&sn.k[l], &sn.v[l]} {
				if sr.Err != nil {
					break // allocate nothing past a short input
				}
				*kv = newKVHost(lay, sn.pos)
				kv.read(sr)
			}
		}
	}
	sn.logits = floats(lay.vocab)
	if sr.Err != nil {
		return nil, fmt.Errorf("gpu: reading a %d-token snapshot after %d bytes of state: %w", pos, sr.N, sr.Err)
	}
	return sn, nil
}
