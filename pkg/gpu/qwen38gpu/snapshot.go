package qwen38gpu

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/nvmai/nvmai/internal/lecodec"
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
)

// A sequence's state between two Forward calls is its position (host and
// device copies), each GDN layer's conv window and recurrent matrices,
// each attention layer's K and V rows [0, pos) in the cache's width, its
// raw indexer keys [0, pos) and complete block keys [0, pos/block), each
// PLE layer's conv window, the n-gram history (the last N−1 ids fed,
// which the hashers replay), and the last row's logits and greedy pick.
// The four residual streams are a pass's scratch: a token's streams start
// from its embedding, so nothing of them outlives a pass. Everything else
// on the device is scratch a pass rewrites before reading, or the sampling
// counts, keyed by the history they hold. So a State restored from a
// Snapshot continues exactly as the State it was taken from.
//
// A decode graph captured before a Restore stays valid unless the KV cache
// grows (allocKV drops it): its buffers are unchanged and it reads the
// position from device memory.
//
// The GPU writes its own layout ("Q38G"), not the CPU engine's ("Q38S"):
// with 16-bit weights the engines differ in the last bits (docs/gpu.md), so
// a state of one would not continue bitwise on the other, and the disk
// prompt cache already keys the engines apart (server.diskKey). A Q38S file
// given to the GPU engine is refused by name.

var (
	_ model.Snapshotter    = (*State)(nil)
	_ model.SnapshotReader = (*State)(nil)
	_ io.WriterTo          = (*Snapshot)(nil)
)

// SnapshotVersion is the version of the layout Snapshot.WriteTo writes.
const SnapshotVersion = 1

var (
	snapshotMagic = [4]byte{'Q', '3', '8', 'G'}
	cpuStateMagic = [4]byte{'Q', '3', '8', 'S'} // qwen38's codec
)

const maxSnapshotLayers = 1024

// snapDims is what sizes a snapshot's arrays, in header order.
var snapDimNames = [...]string{"KV width (bits)", "KV row", "head width", "GDN conv window", "GDN recurrent state",
	"indexer key width", "indexer block", "PLE layer count", "PLE conv window", "n-gram history", "vocabulary"}

type snapDims [len(snapDimNames)]uint32

func (m *Model) snapDims(kvBits int) snapDims {
	c, g := m.cfg, m.g
	return snapDims{uint32(kvBits), uint32(g.kvd), uint32(c.HeadDim), uint32((g.K - 1) * g.C), uint32(g.gdn.Hv * g.gdn.Dk * g.gdn.Dv),
		uint32(g.idx.Dim), uint32(g.idx.Block), uint32(len(m.ple)), uint32((g.Kp - 1) * g.N * g.SH), uint32(max(g.N-1, 0)), uint32(g.V)}
}

// attnHost is one attention layer's rows in host memory: K and V values
// and scales as the device cache holds them (int8 views of the bytes), the
// raw indexer keys and the complete block keys.
type attnHost struct {
	k, v, ks, vs []int8
	kraw, kb     []float32
}

// Snapshot is a copy of a State in host memory; it is never changed once
// made, so WriteTo may run while a State restores from it.
type Snapshot struct {
	m         *Model
	kvBits    int
	pos       int
	next      int32
	conv, rec [][]float32 // per layer; nil for attention layers
	attn      []attnHost  // per layer; empty for GDN layers
	pleConv   [][]float32 // per PLE layer
	recent    []int       // the last min(pos, N−1) ids
	logits    []float32
}

// Len is the number of tokens the snapshot holds.
func (sn *Snapshot) Len() int { return sn.pos }

// KVBits is the width of the snapshot's K and V rows.
func (sn *Snapshot) KVBits() int { return sn.kvBits }

// Bytes is the host memory the snapshot holds.
func (sn *Snapshot) Bytes() int64 {
	n := 4*int64(len(sn.logits)+len(sn.recent)) + 64
	for l := range sn.conv {
		a := &sn.attn[l]
		n += 4*int64(len(sn.conv[l])+len(sn.rec[l])+len(a.kraw)+len(a.kb)) + int64(len(a.k)+len(a.v)+len(a.ks)+len(a.vs))
	}
	for _, p := range sn.pleConv {
		n += 4 * int64(len(p))
	}
	return n
}

// sized allocates sn's arrays for pos tokens of dims (nothing yet read).
func (m *Model) newSnapshot(kvBits, pos int) *Snapshot {
	L := len(m.cfg.Layers)
	return &Snapshot{m: m, kvBits: kvBits, pos: pos, conv: make([][]float32, L), rec: make([][]float32, L),
		attn: make([]attnHost, L), pleConv: make([][]float32, len(m.ple))}
}

// attnRows allocates an attention layer's host rows for pos tokens.
func (m *Model) attnRows(kvBits, pos int) attnHost {
	g := m.g
	values, scales := gpukernels.KVRowBytes(kvBits, g.kvd, g.attn.Dh)
	return attnHost{k: make([]int8, int64(pos)*values), v: make([]int8, int64(pos)*values),
		ks: make([]int8, int64(pos)*scales), vs: make([]int8, int64(pos)*scales),
		kraw: make([]float32, pos*g.idx.Dim), kb: make([]float32, pos/g.idx.Block*g.idx.Dim)}
}

// array is one of a snapshot's arrays: floats, or bytes as the device
// holds them (int8 views).
type array struct {
	f []float32
	b []int8
}

func (a array) bytes() []byte {
	if a.f != nil {
		return cuda.Bytes(a.f)
	}
	return cuda.Bytes(a.b)
}

func (a array) write(sw *lecodec.Writer) {
	if a.f != nil {
		sw.F32s(a.f)
	} else {
		sw.I8s(a.b)
	}
}

func (a array) read(sr *lecodec.Reader) {
	if a.f != nil {
		sr.F32s(a.f)
	} else {
		sr.I8s(a.b)
	}
}

// arrays lists sn's state arrays in the order the layout writes them (the
// history and the logits follow).
func (sn *Snapshot) arrays() []array {
	var as []array
	for l, kind := range sn.m.cfg.Layers {
		if kind == qwen38.LinearAttention {
			as = append(as, array{f: sn.conv[l]}, array{f: sn.rec[l]})
			continue
		}
		a := &sn.attn[l]
		as = append(as, array{b: a.k}, array{b: a.v}, array{b: a.ks}, array{b: a.vs}, array{f: a.kraw}, array{f: a.kb})
	}
	for _, p := range sn.pleConv {
		as = append(as, array{f: p})
	}
	return as
}

// buffers lists st's device buffers in arrays' order.
func (st *State) buffers() []cuda.DevicePtr {
	var ps []cuda.DevicePtr
	for l, kind := range st.m.cfg.Layers {
		if kind == qwen38.LinearAttention {
			ps = append(ps, st.conv[l], st.rec[l])
			continue
		}
		kv := st.kv[l]
		ps = append(ps, kv.K, kv.V, kv.KS, kv.VS, st.kraw[l], st.kb[l])
	}
	return append(ps, st.pleConv...)
}

// deviceCopy pairs a host array with its device buffer.
type deviceCopy struct {
	host []byte
	dev  cuda.DevicePtr
}

// copies pairs sn's arrays and logits with st's buffers.
func (sn *Snapshot) copies(st *State) []deviceCopy {
	as, ps := sn.arrays(), st.buffers()
	cp := make([]deviceCopy, 0, len(as)+3)
	for i, a := range as {
		cp = append(cp, deviceCopy{a.bytes(), ps[i]})
	}
	return append(cp, deviceCopy{cuda.Bytes(sn.logits), st.s.logits})
}

// Snapshot implements model.Snapshotter: it copies the state to host
// memory.
func (st *State) Snapshot() (model.Snapshot, error) {
	if st.failed != nil {
		return nil, fmt.Errorf("qwen38gpu: cannot snapshot a sequence whose last forward failed: %w", st.failed)
	}
	m := st.m
	sn := m.newSnapshot(st.kvBits, st.pos)
	sn.logits = make([]float32, m.g.V)
	sn.recent = slices.Clone(st.recent)
	for l, kind := range m.cfg.Layers {
		if kind == qwen38.LinearAttention {
			sn.conv[l], sn.rec[l] = make([]float32, (m.g.K-1)*m.g.C), make([]float32, m.g.gdn.Hv*m.g.gdn.Dk*m.g.gdn.Dv)
		} else {
			sn.attn[l] = m.attnRows(st.kvBits, st.pos)
		}
	}
	for k := range sn.pleConv {
		sn.pleConv[k] = make([]float32, (m.g.Kp-1)*m.g.N*m.g.SH)
	}
	var dev [2]int32 // the device's position and greedy pick
	err := m.dev.Do(func(c *cuda.Ctx) error {
		for _, cp := range append(sn.copies(st), deviceCopy{cuda.Bytes(dev[:1]), st.dpos}, deviceCopy{cuda.Bytes(dev[1:]), st.next}) {
			if len(cp.host) == 0 {
				continue
			}
			if err := c.DtoH(cp.host, cp.dev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("qwen38gpu: copying a %d-token sequence to host memory: %w", st.pos, err)
	}
	if int(dev[0]) != st.pos {
		return nil, fmt.Errorf("qwen38gpu: the sequence's device position is %d, its host position %d; it cannot be copied", dev[0], st.pos)
	}
	sn.next = dev[1]
	return sn, nil
}

// Restore implements model.Snapshotter: the state becomes the one sn was
// taken from. The KV cache grows to hold it (a larger one is kept).
func (st *State) Restore(s model.Snapshot) error {
	sn, ok := s.(*Snapshot)
	switch {
	case !ok || sn == nil:
		return fmt.Errorf("qwen38gpu: the snapshot (%T) does not come from a qwen4_exp GPU session", s)
	case sn.m != st.m:
		return fmt.Errorf("qwen38gpu: the snapshot comes from another model")
	case sn.kvBits != st.kvBits:
		return kvWidthError(sn.kvBits, st.kvBits)
	case sn.pos > st.maxCtx:
		return fmt.Errorf("qwen38gpu: the snapshot holds %d tokens, more than the sequence's context of %d", sn.pos, st.maxCtx)
	}
	pos := []int32{int32(sn.pos), sn.next}
	err := st.m.dev.Do(func(c *cuda.Ctx) error {
		if st.failed != nil {
			// A failed Forward may have replaced some buffers (allocKV stops
			// at the first allocation that fails): capture afresh.
			st.dropGraphs(c)
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
		// then one wait.
		for _, cp := range append(sn.copies(st), deviceCopy{cuda.Bytes(pos[:1]), st.dpos}, deviceCopy{cuda.Bytes(pos[1:]), st.next}) {
			if len(cp.host) == 0 {
				continue
			}
			if err := c.HtoDAsync(cp.dev, cp.host); err != nil {
				return err
			}
		}
		return c.Sync()
	})
	if err != nil {
		st.failed = err
		return fmt.Errorf("qwen38gpu: restoring a %d-token snapshot: %w", sn.pos, err)
	}
	st.setRecent(sn.recent)
	st.pos, st.failed = sn.pos, nil
	return nil
}

// setRecent makes the hashers' n-gram history the one after ids: a fresh
// history fed the last N−1 ids fed is that history.
func (st *State) setRecent(ids []int) {
	st.recent = append(st.recent[:0], ids...)
	for k, h := range st.hashers {
		h.Reset()
		st.rows[k] = h.Rows(st.rows[k][:0], ids)
	}
}

// noteFed records ids in the n-gram history the snapshots keep.
func (st *State) noteFed(ids []int) {
	keep := max(st.m.g.N-1, 0)
	st.recent = append(st.recent, ids...)
	if n := len(st.recent); n > keep {
		st.recent = append(st.recent[:0], st.recent[n-keep:]...)
	}
}

func kvWidthError(snap, seq int) error {
	return fmt.Errorf("qwen38gpu: the snapshot's KV cache is %d-bit, this sequence's %d-bit: a snapshot resumes only a sequence of its KV width (--kv-bits)", snap, seq)
}

// WriteTo writes the snapshot: "Q38G", version u32, layer count u32, one
// kind byte per layer (qwen38.LayerKind), the eleven dims u32 (KV bits, KV
// row, head width, GDN conv and recurrent floats, indexer key width and
// block, PLE layers, PLE conv floats, n-gram history length N−1,
// vocabulary), position u64, greedy pick i32, ids of history held u32;
// then per layer in order a GDN layer's conv window and recurrent
// matrices, or an attention layer's K values, V values, K scales, V
// scales (bytes as the cache holds them, rows [0, position)), raw indexer
// keys and complete block keys; then per PLE layer its conv window; then
// the history's ids u32 (oldest first); then the logits row. Numbers are
// little-endian, floats as their bits, so a round trip is exact.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	m := sn.m
	b := append([]byte(nil), snapshotMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, SnapshotVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.cfg.Layers)))
	for _, k := range m.cfg.Layers {
		b = append(b, byte(k))
	}
	for _, v := range m.snapDims(sn.kvBits) {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(sn.pos))
	b = binary.LittleEndian.AppendUint32(b, uint32(sn.next))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(sn.recent)))
	sw := lecodec.NewWriter(w)
	sw.Raw(b)
	for _, a := range sn.arrays() {
		a.write(sw)
	}
	hist := make([]byte, 0, 4*len(sn.recent))
	for _, id := range sn.recent {
		hist = binary.LittleEndian.AppendUint32(hist, uint32(id))
	}
	sw.Raw(hist)
	sw.F32s(sn.logits)
	sw.Flush()
	return sw.N, sw.Err
}

// snapHeaderTail is the header after the layer kinds: the dims, position
// u64, greedy pick i32, history length u32.
const snapHeaderTail = 4*len(snapDimNames) + 8 + 4 + 4

// ReadSnapshot implements model.SnapshotReader: it reads a snapshot
// Snapshot.WriteTo wrote for this model, refusing one of another engine,
// geometry or KV width, or longer than this sequence's context, before
// allocating its arrays; each array is allocated only when its turn comes,
// so a cut input allocates at most one array past what it holds.
func (st *State) ReadSnapshot(r io.Reader) (model.Snapshot, error) {
	m := st.m
	var fixed [12]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, fmt.Errorf("qwen38gpu: reading the snapshot header: %w", lecodec.NoEOF(err))
	}
	switch magic := [4]byte(fixed[:4]); magic {
	case snapshotMagic:
	case cpuStateMagic:
		return nil, fmt.Errorf("qwen38gpu: the snapshot is a CPU engine state (%q); the GPU engine resumes only its own (%q) snapshots, as the engines differ in the last bits: let the prompt be prefilled again", magic[:], snapshotMagic[:])
	default:
		return nil, fmt.Errorf("qwen38gpu: not a qwen4_exp GPU snapshot (magic %q, want %q); it was written by another engine or is damaged", magic[:], snapshotMagic[:])
	}
	if v := binary.LittleEndian.Uint32(fixed[4:]); v != SnapshotVersion {
		return nil, fmt.Errorf("qwen38gpu: snapshot version %d; this build reads version %d", v, SnapshotVersion)
	}
	layers := binary.LittleEndian.Uint32(fixed[8:])
	if layers > maxSnapshotLayers || int(layers) != len(m.cfg.Layers) {
		return nil, fmt.Errorf("qwen38gpu: the snapshot has %d layers, this model %d: it was written for another model", layers, len(m.cfg.Layers))
	}
	rest := make([]byte, int(layers)+snapHeaderTail)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("qwen38gpu: reading the snapshot header: %w", lecodec.NoEOF(err))
	}
	for l, k := range m.cfg.Layers {
		if got := qwen38.LayerKind(rest[l]); got != k {
			return nil, fmt.Errorf("qwen38gpu: layer %d of the snapshot is %v, of this model %v: it was written for another model", l, got, k)
		}
	}
	h := rest[layers:]
	want := m.snapDims(st.kvBits)
	for i := range want {
		got := binary.LittleEndian.Uint32(h[4*i:])
		if got == want[i] {
			continue
		}
		if i == 0 {
			return nil, kvWidthError(int(got), st.kvBits)
		}
		return nil, fmt.Errorf("qwen38gpu: the snapshot's %s is %d, this model's %d: it was written for another model", snapDimNames[i], got, want[i])
	}
	h = h[4*len(want):]
	pos := binary.LittleEndian.Uint64(h)
	next := int32(binary.LittleEndian.Uint32(h[8:]))
	held := binary.LittleEndian.Uint32(h[12:])
	switch {
	case pos > uint64(st.maxCtx):
		return nil, fmt.Errorf("qwen38gpu: the snapshot holds %d tokens, more than the sequence's context of %d", pos, st.maxCtx)
	case next < -1 || int(next) >= m.g.V:
		return nil, fmt.Errorf("qwen38gpu: the snapshot's greedy pick %d is outside the vocabulary of %d", next, m.g.V)
	case uint64(held) != min(pos, uint64(max(m.g.N-1, 0))):
		return nil, fmt.Errorf("qwen38gpu: the snapshot's n-gram history holds %d ids, a %d-token sequence %d", held, pos, min(pos, uint64(max(m.g.N-1, 0))))
	}
	sn := m.newSnapshot(st.kvBits, int(pos))
	sn.next = next
	sr := lecodec.NewReader(r)
	for l, kind := range m.cfg.Layers {
		if sr.Err != nil {
			break // allocate nothing past a short input
		}
		if kind == qwen38.LinearAttention {
			sn.conv[l], sn.rec[l] = make([]float32, (m.g.K-1)*m.g.C), make([]float32, m.g.gdn.Hv*m.g.gdn.Dk*m.g.gdn.Dv)
			sr.F32s(sn.conv[l])
			sr.F32s(sn.rec[l])
			continue
		}
		sn.attn[l] = m.attnRows(st.kvBits, sn.pos)
		a := &sn.attn[l]
		for _, x := range []array{{b: a.k}, {b: a.v}, {b: a.ks}, {b: a.vs}, {f: a.kraw}, {f: a.kb}} {
			x.read(sr)
		}
	}
	for k := range sn.pleConv {
		if sr.Err == nil {
			sn.pleConv[k] = make([]float32, (m.g.Kp-1)*m.g.N*m.g.SH)
			sr.F32s(sn.pleConv[k])
		}
	}
	if sr.Err != nil {
		return nil, fmt.Errorf("qwen38gpu: reading a %d-token snapshot after %d bytes of state: %w", pos, sr.N, sr.Err)
	}
	raw := make([]byte, 4*held)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("qwen38gpu: reading the snapshot's n-gram history: %w", lecodec.NoEOF(err))
	}
	for i := range held {
		id := binary.LittleEndian.Uint32(raw[4*i:])
		if id >= uint32(m.g.V) {
			return nil, fmt.Errorf("qwen38gpu: the snapshot's n-gram history holds token %d, outside the vocabulary of %d", id, m.g.V)
		}
		sn.recent = append(sn.recent, int(id))
	}
	sn.logits = make([]float32, m.g.V)
	sr.F32s(sn.logits)
	if sr.Err != nil {
		return nil, fmt.Errorf("qwen38gpu: reading the snapshot's logits: %w", sr.Err)
	}
	return sn, nil
}
