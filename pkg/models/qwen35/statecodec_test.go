package qwen35

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestStateCodecRoundTrip: at every KV width a state written and read back
// is bitwise the original (GDN conv window, recurrent matrices, every KV
// row and scale), and continues with the original's greedy tokens.
func TestStateCodecRoundTrip(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[0].IDs
	V := m.Config().VocabSize
	for _, bits := range kvWidths {
		t.Run(fmt.Sprintf("kv%d", bits), func(t *testing.T) {
			logits, st := prefill(t, m, StateOptions{KVBits: bits, KVInitial: 64}, ids, []int{len(ids)})
			var buf bytes.Buffer
			n, err := st.WriteTo(&buf)
			if err != nil || n != int64(buf.Len()) {
				t.Fatalf("WriteTo: %d bytes, %v (buffer %d)", n, err, buf.Len())
			}
			got, err := m.ReadState(bytes.NewReader(buf.Bytes()), StateOptions{KVBits: bits})
			if err != nil {
				t.Fatal(err)
			}
			assertSameState(t, got, st)
			if got.KVCapacity() != len(ids) {
				t.Errorf("read state holds %d tokens of KV, want exactly the %d written", got.KVCapacity(), len(ids))
			}
			first := argmax(logits[len(logits)-V:])
			if a, b := greedy(t, m, st, first, 10), greedy(t, m, got, first, 10); !slices.Equal(a, b) {
				t.Fatalf("read state continues %v, original %v", b, a)
			}
		})
	}
}

// TestStateCodecRefuses: another width, a shorter context, another model's
// geometry and every truncation are errors, never a panic or a state.
func TestStateCodecRefuses(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[0].IDs
	_, st := prefill(t, m, StateOptions{KVBits: KVInt8}, ids, []int{len(ids)})
	var buf bytes.Buffer
	if _, err := st.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	read := func(b []byte, opts StateOptions) error {
		s, err := m.ReadState(bytes.NewReader(b), opts)
		if (s == nil) == (err == nil) {
			t.Fatalf("ReadState returned state %v and error %v", s != nil, err)
		}
		return err
	}
	if err := read(raw, StateOptions{KVBits: KVBF16}); err == nil {
		t.Error("an int8 state was read into a bf16 session")
	}
	if err := read(raw, StateOptions{KVBits: KVInt8, MaxContext: len(ids) - 1}); err == nil {
		t.Error("a state longer than the context was read")
	}
	other := slices.Clone(raw)
	other[12] ^= 1 // the first layer's kind
	if err := read(other, StateOptions{KVBits: KVInt8}); err == nil {
		t.Error("a state with another layer pattern was read")
	}
	for cut := 0; cut < len(raw); cut += max(1, len(raw)/97) {
		if err := read(raw[:cut], StateOptions{KVBits: KVInt8}); err == nil {
			t.Fatalf("a state cut at %d of %d bytes was read", cut, len(raw))
		}
	}
}

// FuzzReadState: whatever the bytes, ReadState returns a state or an
// error, allocating no more than the session's context allows.
func FuzzReadState(f *testing.F) {
	m, _ := fixtureModels[0].open(f, nil)
	st := m.NewState(StateOptions{KVBits: KVInt8, KVInitial: 4})
	if err := st.FillSynthetic(3, 1); err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := st.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:40])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := m.ReadState(bytes.NewReader(b), StateOptions{KVBits: KVInt8, MaxContext: 64})
		if (s == nil) == (err == nil) {
			t.Fatalf("state %v, error %v", s != nil, err)
		}
	})
}
