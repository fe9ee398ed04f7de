package gpu

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/lecodec"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// The codec tests run on the CPU: the parse is a function of the layout.

func testLayout() snapLayout {
	G, A := qwen35.LinearAttention, qwen35.FullAttention
	return snapLayout{kinds: []qwen35.LayerKind{G, G, A, G, A}, kvRow: 8, kvBits: 32, convLen: 6, recLen: 16, vocab: 32}
}

// atWidth is lay with its KV cache at bits (two int8 scale groups a row).
func atWidth(lay snapLayout, bits int) snapLayout {
	lay.kvBits, lay.kvScales = bits, 0
	if bits == model.KVInt8 {
		lay.kvScales = 2
	}
	return lay
}

// kvRowBytes is one K (or V) row's bytes at lay's width.
func kvRowBytes(lay snapLayout) int {
	switch lay.kvBits {
	case model.KVBF16:
		return 2 * lay.kvRow
	case model.KVInt8:
		return lay.kvRow + 4*lay.kvScales
	}
	return 4 * lay.kvRow
}

// randomSnapshot fills every array with random bits (NaN payloads, −0 and
// infinities included), as a device copy may hold them.
func randomSnapshot(lay snapLayout, pos int, seed uint64) *Snapshot {
	r := rand.New(rand.NewPCG(seed, 7))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = math.Float32frombits(r.Uint32())
		}
		return x
	}
	sn := newSnapshot(lay, pos)
	sn.next = int32(r.IntN(lay.vocab))
	for l, kind := range lay.kinds {
		if kind == qwen35.LinearAttention {
			sn.conv[l], sn.rec[l] = fill(lay.convLen), fill(lay.recLen)
			continue
		}
		for _, kv := range []*kvHost{&sn.k[l], &sn.v[l]} {
			*kv = newKVHost(lay, pos)
			for i := range kv.values() {
				kv.values()[i] = byte(r.Uint32())
			}
			copy(kv.scales, fill(len(kv.scales)))
		}
	}
	sn.logits = fill(lay.vocab)
	return sn
}

func sameSnapshot(a, b *Snapshot) bool {
	if a.pos != b.pos || a.next != b.next || !bitsEqual(a.logits, b.logits) || len(a.lay.kinds) != len(b.lay.kinds) {
		return false
	}
	if a.lay.kvBits != b.lay.kvBits {
		return false
	}
	for l := range a.lay.kinds {
		if !bitsEqual(a.conv[l], b.conv[l]) || !bitsEqual(a.rec[l], b.rec[l]) || !sameKV(a.k[l], b.k[l]) || !sameKV(a.v[l], b.v[l]) {
			return false
		}
	}
	return true
}

func sameKV(a, b kvHost) bool {
	return bytes.Equal(a.values(), b.values()) && len(a.values()) == len(b.values()) && bitsEqual(a.scales, b.scales) &&
		(a.f32 == nil) == (b.f32 == nil) && (a.b16 == nil) == (b.b16 == nil) && (a.q8 == nil) == (b.q8 == nil)
}

func encodeSnapshot(t testing.TB, sn *Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := sn.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// A written snapshot reads back bit for bit, at every length and KV
// width, and takes the bytes its header and arrays need (K and V in the
// width: int8 values then their scales); Bytes counts the arrays.
func TestSnapshotCodecRoundTrip(t *testing.T) {
	for _, bits := range []int{32, 16, 8} {
		lay := atWidth(testLayout(), bits)
		for _, pos := range []int{0, 1, 5, 16} {
			sn := randomSnapshot(lay, pos, uint64(pos))
			b := encodeSnapshot(t, sn)
			arrays := 4*(3*(lay.convLen+lay.recLen)+lay.vocab) + 2*2*pos*kvRowBytes(lay)
			if want := snapHeaderFixed + len(lay.kinds) + snapHeaderTail + arrays; len(b) != want {
				t.Errorf("%d-bit, pos %d: %d bytes, want %d", bits, pos, len(b), want)
			}
			if got := sn.Bytes(); got < int64(arrays) || got > int64(arrays)+64 {
				t.Errorf("%d-bit, pos %d: Bytes %d for %d bytes of arrays", bits, pos, got, arrays)
			}
			got, err := readSnapshot(bytes.NewReader(b), lay, 16)
			if err != nil {
				t.Fatalf("%d-bit, pos %d: %v", bits, pos, err)
			}
			if !sameSnapshot(got, sn) || got.Len() != pos || got.Bytes() != sn.Bytes() || got.KVBits() != bits {
				t.Errorf("%d-bit, pos %d: the snapshot read back differs from the one written", bits, pos)
			}
		}
	}
	// Arrays longer than the staging buffer cross its boundary.
	big := snapLayout{kinds: []qwen35.LayerKind{qwen35.FullAttention, qwen35.LinearAttention}, kvRow: 4099, kvBits: 32, convLen: 3, recLen: 20000, vocab: 17000}
	sn := randomSnapshot(big, 9, 1)
	got, err := readSnapshot(bytes.NewReader(encodeSnapshot(t, sn)), big, 9)
	if err != nil || !sameSnapshot(got, sn) {
		t.Fatalf("a snapshot larger than the staging buffer: err %v, equal %v", err, err == nil && sameSnapshot(got, sn))
	}
}

// A version-1 snapshot (written before the KV width was recorded: float32
// KV) still reads, into a float32 sequence only.
func TestReadSnapshotVersion1(t *testing.T) {
	lay := testLayout()
	sn := randomSnapshot(lay, 5, 9)
	v2 := encodeSnapshot(t, sn)
	tail := snapHeaderFixed + len(lay.kinds)
	v1 := slices.Concat(v2[:tail+4], v2[tail+8:]) // without the bits field
	binary.LittleEndian.PutUint32(v1[4:], 1)
	got, err := readSnapshot(bytes.NewReader(v1), lay, 16)
	if err != nil || !sameSnapshot(got, sn) {
		t.Fatalf("version 1: err %v, equal %v", err, err == nil && sameSnapshot(got, sn))
	}
	if _, err := readSnapshot(bytes.NewReader(v1), atWidth(lay, 8), 16); err == nil || !strings.Contains(err.Error(), "KV cache is 32-bit, this sequence's 8-bit") {
		t.Fatalf("version 1 into an 8-bit sequence: %v", err)
	}
}

// The reader refuses, naming the field, a snapshot of another geometry,
// version or engine, one longer than the context, and one cut anywhere.
func TestReadSnapshotRefuses(t *testing.T) {
	lay := testLayout()
	good := encodeSnapshot(t, randomSnapshot(lay, 5, 3))
	tail := snapHeaderFixed + len(lay.kinds) // where the u32 fields start
	put32 := func(off int, v uint32) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
	}
	for _, tc := range []struct {
		name   string
		edit   func([]byte)
		maxCtx int
		want   string
	}{
		{"the CPU engine's magic", func(b []byte) { copy(b, "Q35S") }, 16, "not a GPU engine snapshot"},
		{"a later version", put32(4, 3), 16, "version 3"},
		{"fewer layers", put32(8, 4), 16, "has 4 layers, this model 5"},
		{"a huge layer count", put32(8, math.MaxUint32), 16, "layers"},
		{"another layer kind", func(b []byte) { b[snapHeaderFixed+2] = byte(qwen35.LinearAttention) }, 16, "layer 2 of the snapshot"},
		{"wider KV rows", put32(tail, 16), 16, "KV rows hold 16 floats, this model's 8"},
		{"another KV width", put32(tail+4, 8), 16, "the snapshot's KV cache is 8-bit, this sequence's 32-bit"},
		{"no KV width", put32(tail+4, 7), 16, "KV width is 7 bits"},
		{"another conv window", put32(tail+8, 7), 16, "Gated DeltaNet layers hold 7+16"},
		{"another recurrent state", put32(tail+12, 15), 16, "Gated DeltaNet layers hold 6+15"},
		{"another vocabulary", put32(tail+16, 31), 16, "vocabulary 32"},
		{"longer than the context", nil, 4, "holds 5 tokens, more than the sequence's context of 4"},
		{"a huge length", func(b []byte) { binary.LittleEndian.PutUint64(b[tail+20:], math.MaxUint64) }, 16, "more than the sequence's context"},
		{"a pick past the vocabulary", put32(tail+28, 32), 16, "greedy pick 32"},
		{"a pick below −1", put32(tail+28, math.MaxUint32-1), 16, "greedy pick -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := slices.Clone(good)
			if tc.edit != nil {
				tc.edit(b)
			}
			_, err := readSnapshot(bytes.NewReader(b), lay, tc.maxCtx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for n := range len(good) {
		if _, err := readSnapshot(bytes.NewReader(good[:n]), lay, 16); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut after %d of %d bytes: %v, want a truncation", n, len(good), err)
		}
	}
}

// failingWriter takes room bytes, then fails.
type failingWriter struct{ room int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.room {
		n := w.room
		w.room = 0
		return n, errDiskFull
	}
	w.room -= len(p)
	return len(p), nil
}

// A write that fails anywhere is reported, with the bytes that went out.
func TestSnapshotWriteToReportsWriteErrors(t *testing.T) {
	big := snapLayout{kinds: []qwen35.LayerKind{qwen35.FullAttention, qwen35.LinearAttention}, kvRow: 4099, kvBits: 8, kvScales: 4099, convLen: 3, recLen: 20000, vocab: 17000}
	sn := randomSnapshot(big, 9, 2)
	size := len(encodeSnapshot(t, sn))
	for _, room := range []int{0, 10, lecodec.Chunk - 1, lecodec.Chunk + 5, size - 1} {
		n, err := sn.WriteTo(&failingWriter{room: room})
		if !errors.Is(err, errDiskFull) || n != int64(room) {
			t.Errorf("room %d of %d: n %d, err %v; want n %d and the writer's error", room, size, n, err, room)
		}
	}
}

// Whatever the bytes, the reader returns an error or a snapshot whose
// encoding is the prefix it consumed, never panics, and allocates no
// more than a state filled to its context holds.
func FuzzReadSnapshot(f *testing.F) {
	lay := testLayout()
	const maxCtx = 12
	for _, pos := range []int{0, 2, 12} {
		f.Add(encodeSnapshot(f, randomSnapshot(lay, pos, uint64(pos))))
	}
	f.Add([]byte("NGPS"))
	f.Add([]byte{})
	limit := randomSnapshot(lay, maxCtx, 0).Bytes()
	f.Fuzz(func(t *testing.T, data []byte) {
		sn, err := readSnapshot(bytes.NewReader(data), lay, maxCtx)
		if err != nil {
			return
		}
		if sn.Len() > maxCtx || sn.Bytes() > limit {
			t.Fatalf("a snapshot of %d tokens holding %d bytes (context %d, at most %d)", sn.Len(), sn.Bytes(), maxCtx, limit)
		}
		if b := encodeSnapshot(t, sn); !bytes.Equal(b, data[:min(len(b), len(data))]) {
			t.Fatal("the snapshot read back encodes differently from the bytes it was read from")
		}
	})
}

// The GPU tests below need a device and the fixtures.

// decodeGreedy takes k greedy steps on st: the picks, and the row each was
// picked from (the first is st's row now).
func decodeGreedy(t *testing.T, st *State, k int) ([]int, [][]float32) {
	t.Helper()
	var ids []int
	var rows [][]float32
	for range k {
		row := make([]float32, st.m.geom.V)
		if err := st.Logits(row); err != nil {
			t.Fatal(err)
		}
		id, err := st.Argmax()
		if err != nil {
			t.Fatal(err)
		}
		ids, rows = append(ids, id), append(rows, row)
		if err := st.Forward([]int{id}); err != nil {
			t.Fatal(err)
		}
	}
	return ids, rows
}

func longestRef(t *testing.T, refs string) []int {
	var ids []int
	for _, p := range loadRefs(t, refs) {
		if len(p.IDs) > len(ids) {
			ids = p.IDs
		}
	}
	return ids
}

// snapshotAfter feeds ids to a new state of m (opt; closed when the test
// ends) and returns the state with its snapshot.
func snapshotAfter(t *testing.T, m *Model, opt StateOptions, ids []int) (*State, model.Snapshot) {
	t.Helper()
	st, err := m.NewState(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Forward(ids); err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return st, snap
}

// A state restored from a snapshot continues exactly as the state it was
// taken from: the same greedy tokens from bitwise the same logits, in a
// fresh state whose smaller cache must grow (its decode graph captured
// for the old cache dropped), a fresh state with a larger cache, the
// original rewound after it moved on (its graph kept), and a snapshot
// written to bytes and read back.
func TestSnapshotRestoreContinuesBitwise(t *testing.T) {
	needGPU(t)
	for _, tc := range []struct {
		snapshot, refs string
		bits           int
	}{
		{"tiny-moe-fused", "tiny-moe.refs.json", 4},
		{"tiny-dense", "tiny-dense.refs.json", 8},
	} {
		t.Run(tc.snapshot, func(t *testing.T) {
			e := loadEngine(t, install(t, tc.snapshot, tc.bits), true)
			m := e.Model().(*Backend).Model
			ids := longestRef(t, tc.refs)
			const steps = 16
			orig, snap := snapshotAfter(t, m, StateOptions{KVInitial: 4}, ids)
			if snap.Len() != len(ids) || snap.Bytes() <= 0 {
				t.Fatalf("snapshot of %d tokens: Len %d, Bytes %d", len(ids), snap.Len(), snap.Bytes())
			}
			var disk bytes.Buffer
			if _, err := snap.(*Snapshot).WriteTo(&disk); err != nil {
				t.Fatal(err)
			}
			want, wantRows := decodeGreedy(t, orig, steps)
			check := func(name string, st *State) {
				t.Helper()
				if st.Len() != len(ids) {
					t.Errorf("%s: Len %d after Restore, want %d", name, st.Len(), len(ids))
				}
				got, rows := decodeGreedy(t, st, steps)
				same := 0
				for same < steps && bitsEqual(rows[same], wantRows[same]) {
					same++
				}
				t.Logf("FIDELITY snapshot %s %s: greedy equal %v, logits bitwise equal for %d of %d steps", tc.snapshot, name, slices.Equal(got, want), same, steps)
				if !slices.Equal(got, want) || same != steps {
					t.Errorf("%s: restored greedy %v, original %v; logits differ from step %d", name, got, want, same)
				}
			}

			small, err := m.NewState(StateOptions{KVInitial: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer small.Close()
			for _, id := range []int{1, 2} { // decode steps: a graph captured for a 2-token cache
				if err := small.Forward([]int{id}); err != nil {
					t.Fatal(err)
				}
			}
			if err := small.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if small.kcap < len(ids) || small.graph != nil {
				t.Errorf("after Restore the cache holds %d tokens (want at least %d) and the old graph is kept: %v", small.kcap, len(ids), small.graph != nil)
			}
			check("fresh state, growing cache", small)

			large, err := m.NewState(StateOptions{KVInitial: len(ids) + 4*steps})
			if err != nil {
				t.Fatal(err)
			}
			defer large.Close()
			if err := large.Restore(snap); err != nil {
				t.Fatal(err)
			}
			check("fresh state, larger cache", large)

			graph, kcap := orig.graph, orig.kcap
			if err := orig.Restore(snap); err != nil {
				t.Fatal(err)
			}
			if orig.graph != graph || orig.kcap != kcap {
				t.Errorf("rewinding within the cache replaced the graph (%v) or the cache (%d → %d)", orig.graph != graph, kcap, orig.kcap)
			}
			check("original rewound", orig)

			read, err := m.NewState(StateOptions{KVInitial: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer read.Close()
			rs, err := read.ReadSnapshot(bytes.NewReader(disk.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if !sameSnapshot(rs.(*Snapshot), snap.(*Snapshot)) || rs.Bytes() != snap.Bytes() {
				t.Error("the snapshot read back from bytes differs from the one written")
			}
			if err := read.Restore(rs); err != nil {
				t.Fatal(err)
			}
			check("read back from bytes", read)
		})
	}
}

// Restore and ReadSnapshot refuse a snapshot of another model, one longer
// than the state's context, and one of another engine; a refused Restore
// leaves the state usable.
func TestSnapshotRefusals(t *testing.T) {
	needGPU(t)
	moe := loadEngine(t, install(t, "tiny-moe-fused", 4), true).Model().(*Backend).Model
	dense := loadEngine(t, install(t, "tiny-dense", 8), true).Model().(*Backend).Model
	ids := longestRef(t, "tiny-moe.refs.json")[:40]
	st, snap := snapshotAfter(t, moe, StateOptions{}, ids)
	var disk bytes.Buffer
	if _, err := snap.(*Snapshot).WriteTo(&disk); err != nil {
		t.Fatal(err)
	}

	short, err := moe.NewState(StateOptions{MaxContext: len(ids) - 1})
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if err := short.Restore(snap); err == nil || !strings.Contains(err.Error(), "more than the sequence's context") {
		t.Errorf("Restore past the context: %v", err)
	}
	if _, err := short.ReadSnapshot(bytes.NewReader(disk.Bytes())); err == nil || !strings.Contains(err.Error(), "more than the sequence's context") {
		t.Errorf("ReadSnapshot past the context: %v", err)
	}
	if err := short.Forward(ids[:4]); err != nil {
		t.Errorf("a state that refused a snapshot no longer runs: %v", err)
	}

	other, err := dense.NewState(StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Restore(snap); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Errorf("Restore into another model: %v", err)
	}
	if !reflect.DeepEqual(moe.snapLayout(32), dense.snapLayout(32)) {
		if _, err := other.ReadSnapshot(bytes.NewReader(disk.Bytes())); err == nil || !strings.Contains(err.Error(), "another model") {
			t.Errorf("ReadSnapshot of another geometry: %v", err)
		}
	}
	if err := st.Restore(fakeSnapshot{}); err == nil || !strings.Contains(err.Error(), "does not come from a GPU session") {
		t.Errorf("Restore of another engine's snapshot: %v", err)
	}
}

type fakeSnapshot struct{}

func (fakeSnapshot) Len() int     { return 1 }
func (fakeSnapshot) Bytes() int64 { return 1 }

// Through the runtime's sessions, as the server's prompt cache uses them:
// half a prompt prefilled, snapshotted, restored into another session (in
// memory, and written to bytes and read back) and the rest of the prompt
// fed gives the greedy tokens of a cold prefill of the whole prompt.
func TestSnapshotResumesLikeAColdPrefill(t *testing.T) {
	needGPU(t)
	e := loadEngine(t, install(t, "tiny-moe-fused", 4), true)
	ids := longestRef(t, "tiny-moe.refs.json")
	const steps = 16
	cold := greedy(t, e, ids, steps)
	resumesLikeCold(t, e, ids, runtime.SessionOptions{KVInitial: 16, KVBits: 32}, steps, cold, "", "")
}

// resumesLikeCold prefills half of ids in a session of opt, snapshots it,
// and checks that the snapshot, restored as taken and from its bytes into
// fresh sessions, continues with cold's greedy tokens. kv and errPrefix
// name the case in the FIDELITY log and the errors.
func resumesLikeCold(t *testing.T, e *runtime.Engine, ids []int, opt runtime.SessionOptions, steps int, cold []int, kv, errPrefix string) {
	t.Helper()
	ctx := context.Background()
	s := e.NewSession(opt)
	defer s.Close()
	if !s.DiskSnapshots() {
		t.Fatal("a GPU session does not write snapshots to disk")
	}
	half := len(ids) / 2
	if err := s.Prefill(ctx, ids[:half], 0); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if snap == nil {
		t.Fatal("a GPU session gave no snapshot")
	}
	var disk bytes.Buffer
	if _, err := snap.WriteTo(&disk); err != nil {
		t.Fatal(err)
	}
	for _, fromDisk := range []bool{false, true} {
		r := e.NewSession(opt)
		defer r.Close()
		sn := snap
		if fromDisk {
			var err error
			if sn, err = r.ReadSnapshot(bytes.NewReader(disk.Bytes())); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Restore(sn); err != nil {
			t.Fatal(err)
		}
		res, err := r.Generate(ctx, ids[half:], runtime.GenerateOptions{MaxTokens: steps, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("FIDELITY snapshot %sresumed at %d of %d tokens (from disk %v): greedy equal to a cold prefill %v", kv, half, len(ids), fromDisk, slices.Equal(res.IDs, cold))
		if !slices.Equal(res.IDs, cold) {
			t.Errorf("%sfrom disk %v: resumed greedy %v, cold %v", errPrefix, fromDisk, res.IDs, cold)
		}
	}
}
