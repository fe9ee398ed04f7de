package qwen35

import (
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// prefill feeds ids to a fresh state in pieces of the given sizes (their sum
// is len(ids)) and returns the logits of every position.
func prefill(t testing.TB, m *Model, opts StateOptions, ids []int, pieces []int) ([]float32, *State) {
	t.Helper()
	V := m.Config().VocabSize
	st := m.NewState(opts)
	logits := make([]float32, len(ids)*V)
	at := 0
	for _, n := range pieces {
		if err := m.Forward(st, ids[at:at+n], logits[at*V:(at+n)*V], true); err != nil {
			t.Fatal(err)
		}
		at += n
	}
	if at != len(ids) {
		t.Fatalf("pieces %v cover %d of %d tokens", pieces, at, len(ids))
	}
	return logits, st
}

func ones(n int) []int { return slices.Repeat([]int{1}, n) }

// bitwiseDiff returns the first index where a and b differ bitwise, or −1.
var bitwiseDiff = testfix.BitwiseDiff

// TestChunkingIsBitwiseInvisible checks the determinism contract: any
// chunking of the prompt, including one token at a time (decode), gives
// bitwise the logits of a single full prefill, and leaves the same state.
func TestChunkingIsBitwiseInvisible(t *testing.T) {
	for _, fm := range fixtureModels {
		t.Run(fm.name, func(t *testing.T) {
			m, _ := fm.open(t, nil)
			refs := loadRefs(t, filepath.Join(fixturesDir(t), fm.refs))
			for _, pi := range pick([]int{0}, []int{0, 2, min(4, len(refs)-1)}) {
				ids := refs[pi].IDs
				full, fullSt := prefill(t, m, StateOptions{}, ids, []int{len(ids)})
				splits := map[string][]int{
					"3+rest":         {3, len(ids) - 3}, // 3+5 on prompt 0
					"token-by-token": ones(len(ids)),
				}
				if !quickTests() {
					splits["1+2+rest"] = []int{1, 2, len(ids) - 3}
					splits["halves"] = []int{len(ids) / 2, len(ids) - len(ids)/2}
				}
				for name, pieces := range splits {
					got, st := prefill(t, m, StateOptions{}, ids, pieces)
					if i := bitwiseDiff(got, full); i >= 0 {
						t.Errorf("prompt %d %s: logit %d = %v, full prefill %v", pi, name, i, got[i], full[i])
					}
					assertSameState(t, st, fullSt)
				}
			}
		})
	}
}

// TestInternalChunking shrinks the internal chunk so one Forward of a
// prompt runs as several passes, and checks it changes nothing.
func TestInternalChunking(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[pick(0, 4)].IDs
	full, _ := prefill(t, m, StateOptions{}, ids, []int{len(ids)})
	defer func(n int) { maxChunk = n }(maxChunk)
	maxChunk = 3
	got, _ := prefill(t, m, StateOptions{}, ids, []int{len(ids)})
	if i := bitwiseDiff(got, full); i >= 0 {
		t.Errorf("chunks of 3: logit %d = %v, one pass %v", i, got[i], full[i])
	}
	// Only the last row when !allLogits, across internal chunks.
	st := m.NewState(StateOptions{})
	V := m.Config().VocabSize
	last := make([]float32, V)
	if err := m.Forward(st, ids, last, false); err != nil {
		t.Fatal(err)
	}
	if i := bitwiseDiff(last, full[(len(ids)-1)*V:]); i >= 0 {
		t.Errorf("last-row logits differ at %d", i)
	}
}

func assertSameState(t *testing.T, a, b *State) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("state lengths %d and %d", a.Len(), b.Len())
	}
	for i := range a.layers {
		la, lb := &a.layers[i], &b.layers[i]
		if !slices.Equal(bits(la.conv), bits(lb.conv)) || !slices.Equal(bits(la.rec), bits(lb.rec)) {
			t.Errorf("layer %d: GDN state differs", i)
		}
		if la.kv != nil && !la.kv.SamePrefix(lb.kv, a.pos) {
			t.Errorf("layer %d: KV cache differs", i)
		}
	}
}

func bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

// TestKVGrowth starts the KV caches at 2 tokens so a prompt and its decode
// grow them several times, and checks nothing written is lost: the logits
// equal those of a state that never grew. The full set uses the 960-token
// prompt.
func TestKVGrowth(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	refs := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))
	ids := refs[pick(0, len(refs)-1)].IDs
	V := m.Config().VocabSize
	run := func(opts StateOptions) ([]float32, []int, *State) {
		st := m.NewState(opts)
		last := make([]float32, V)
		for _, piece := range [][]int{ids[:3], ids[3:4], ids[4:]} {
			if err := m.Forward(st, piece, last, false); err != nil {
				t.Fatal(err)
			}
		}
		return last, greedy(t, m, st, argmax(last), pick(10, 30)), st
	}
	want, wantGreedy, wantSt := run(StateOptions{})
	got, gotGreedy, st := run(StateOptions{KVInitial: 2})
	if i := bitwiseDiff(got, want); i >= 0 {
		t.Fatalf("%d-token prompt, KVInitial=2: logit %d = %v, KVInitial=8192 %v", len(ids), i, got[i], want[i])
	}
	if !slices.Equal(gotGreedy, wantGreedy) {
		t.Errorf("greedy after growth %v, without %v", gotGreedy, wantGreedy)
	}
	wantCap := 2
	for wantCap < st.Len() {
		wantCap *= 2
	}
	if st.KVCapacity() != wantCap {
		t.Errorf("capacity after %d tokens from 2: %d, want %d", st.Len(), st.KVCapacity(), wantCap)
	}
	if wantSt.KVCapacity() != min(DefaultKVInitial, m.Config().MaxContext) {
		t.Errorf("default capacity %d", wantSt.KVCapacity())
	}
	assertSameState(t, st, wantSt)
}

// TestMaxContext checks the clamp of growth to MaxContext and that a
// Forward past it fails before touching the state.
func TestMaxContext(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	ids := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[4].IDs[:20]
	st := m.NewState(StateOptions{KVInitial: 4, MaxContext: 21})
	if err := m.Forward(st, ids, nil, false); err != nil {
		t.Fatal(err)
	}
	if st.KVCapacity() != 21 {
		t.Errorf("capacity %d, want the max context 21", st.KVCapacity())
	}
	snap := st.Clone()
	if err := m.Forward(st, ids[:2], nil, false); err == nil {
		t.Fatal("Forward past MaxContext succeeded")
	} else {
		t.Logf("error: %v", err)
	}
	assertSameState(t, st, snap)
	if err := m.Forward(st, ids[:1], nil, false); err != nil {
		t.Fatalf("the last token that fits: %v", err)
	}
	if st.Len() != 21 {
		t.Errorf("Len %d, want 21", st.Len())
	}
	if opt := m.NewState(StateOptions{KVInitial: 100, MaxContext: 10}); opt.KVCapacity() != 10 {
		t.Errorf("KVInitial above MaxContext: capacity %d, want 10", opt.KVCapacity())
	}
	if d := m.NewState(StateOptions{}); d.MaxContext() != m.Config().MaxContext {
		t.Errorf("default max context %d, want max_position_embeddings %d", d.MaxContext(), m.Config().MaxContext)
	}
}

// TestCloneAndCopyFrom snapshots a prefix, continues the original, and
// checks the snapshot (and a state restored from it) continues identically.
func TestCloneAndCopyFrom(t *testing.T) {
	m, _ := fixtureModels[0].open(t, nil)
	ref := loadRefs(t, filepath.Join(fixturesDir(t), fixtureModels[0].refs))[0]
	V := m.Config().VocabSize
	st := m.NewState(StateOptions{KVInitial: 4})
	last := make([]float32, V)
	if err := m.Forward(st, ref.IDs, last, false); err != nil {
		t.Fatal(err)
	}
	snap := st.Clone()
	first := argmax(last)
	n := pick(8, 20)
	a := greedy(t, m, st, first, n) // grows st's KV and moves it on
	b := greedy(t, m, snap, first, n)
	if !slices.Equal(a, b) || !slices.Equal(a, ref.Greedy[:n]) {
		t.Fatalf("clone diverged: %v vs %v (ref %v)", a, b, ref.Greedy[:n])
	}
	restored := m.NewState(StateOptions{KVInitial: 2})
	if err := restored.CopyFrom(snap); err != nil {
		t.Fatal(err)
	}
	st.Reset()
	if st.Len() != 0 {
		t.Fatalf("Len after Reset %d", st.Len())
	}
	if err := st.CopyFrom(restored); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, st, restored)
	small := m.NewState(StateOptions{MaxContext: 3})
	if err := small.CopyFrom(snap); err == nil {
		t.Error("CopyFrom into a state with a smaller max context succeeded")
	}
}
