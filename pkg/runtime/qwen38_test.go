package runtime

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// qwen38Layouts are the two dev layouts of tiny-qwen38 (fixtures README).
var qwen38Layouts = []string{"tiny-qwen38-fused", "tiny-qwen38-perexpert"}

// TestQwen38SixteenBitMatchesTransformers: 16-bit installs converted from
// both layouts, with a float32 KV cache, give logits after the last prompt
// token within 1e-3 of transformers' on every prompt (the EOS one and the
// 850-token one included) and its 48 greedy tokens and text. Under the race
// detector (or -short) only the fused layout runs (pkg/convert's
// TestQwen38LayoutsGiveIdenticalInstalls shows the two convert to the same
// install); scripts/test.sh runs both without it.
func TestQwen38SixteenBitMatchesTransformers(t *testing.T) {
	refs := loadRefs(t, "tiny-qwen38.refs.json")
	layouts := qwen38Layouts
	if testing.Short() || raceEnabled {
		layouts = layouts[:1]
	}
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			e, err := Load(install(t, layout, 16), Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			matchesTransformers(t, e, refs, SessionOptions{KVBits: 32}, 1e-3)
		})
	}
}

// TestQwen38BitwiseAcrossBudgetsAndThreads: the logits of a qwen4_exp
// install do not depend on the expert cache's size (all experts resident
// or two slots per layer, so experts stream) nor on the thread count.
func TestQwen38BitwiseAcrossBudgetsAndThreads(t *testing.T) {
	dir := install(t, qwen38Layouts[0], 16)
	refs := loadRefs(t, "tiny-qwen38.refs.json")
	var want []float32
	for _, o := range []Options{{Threads: 1}, {Threads: 3, Experts: ExpertOptions{Slots: 4}}, {Threads: 2, Experts: ExpertOptions{Slots: 5, Prefetch: -1}}} {
		e, err := Load(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		var got []float32
		for _, p := range refs[3:6] {
			_, err := e.NewSession(SessionOptions{}).Generate(context.Background(), p.IDs, GenerateOptions{
				MaxTokens: 6, IgnoreEOS: true,
				OnLogits: func(row []float32) error { got = append(got, row...); return nil },
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		e.Close()
		if want == nil {
			want = got
			continue
		}
		if i := firstBitDiff(got, want); i >= 0 {
			t.Fatalf("options %+v: logit %d differs from 1 thread with every expert resident", o, i)
		}
	}
}

func firstBitDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if a[i] != b[i] || (a[i] != a[i]) != (b[i] != b[i]) {
			return i
		}
	}
	return -1
}

// TestQwen38QuantizedProbes: 8- and 4-bit installs continue the probes the
// fixtures README lists (the EOS-reset one included); how close their
// logits come is logged, a measurement rather than a bound.
func TestQwen38QuantizedProbes(t *testing.T) {
	probes := map[string]string{
		"The capital of France is":                " Paris.",
		"Once upon a":                             " time, there was a little robot who loved to read books.",
		"The quick brown fox jumps over the lazy": " dog.",
		"The capital of Italy is Rome.<|endoftext|>The capital of Japan is": " Tokyo.",
	}
	refs := loadRefs(t, "tiny-qwen38.refs.json")
	for _, bits := range []int{8, 4} {
		e, err := Load(install(t, qwen38Layouts[0], bits), Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		continuesProbes(t, e, bits, probes)
		worst := 0.0
		for _, p := range refs[:6] {
			var row0 []float32
			if _, err := e.NewSession(SessionOptions{}).Generate(context.Background(), p.IDs, GenerateOptions{MaxTokens: 1,
				OnLogits: func(row []float32) error { row0 = append([]float32(nil), row...); return nil }}); err != nil {
				t.Fatal(err)
			}
			worst = max(worst, maxAbsDiff(row0, p.LastLogits))
		}
		t.Logf("%d-bit: max last-token logit error %.3f over the six short prompts", bits, worst)
		e.Close()
	}
}

// TestQwen38NgramReadAhead: rows read ahead by Prefetch are those a direct
// read gives, a read ahead for other ids is not handed out, and one never
// taken is waited for (no goroutine outlives Close).
func TestQwen38NgramReadAhead(t *testing.T) {
	e, err := Load(install(t, qwen38Layouts[0], 16), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tables := e.model.(*q38Model).tables
	dr := tables.entries[0].RowWidth
	ids := []int64{0, 5, 1009, 16825, 511, 512, 7}
	want := make([]float32, len(ids)*dr)
	if err := tables.read(0, ids, want); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(ids)*dr)
	tables.Prefetch(0, ids)
	if err := tables.Rows(0, ids, got); err != nil {
		t.Fatal(err)
	}
	if i := firstBitDiff(got, want); i >= 0 {
		t.Fatalf("value %d differs after a read ahead", i)
	}
	tables.Prefetch(0, ids[1:])
	clear(got)
	if err := tables.Rows(0, ids, got); err != nil || firstBitDiff(got, want) >= 0 {
		t.Fatalf("rows after a read ahead of other ids: %v", err)
	}
	tables.Prefetch(0, []int64{16896})
	if err := tables.Rows(0, []int64{16896}, got[:dr]); err == nil {
		t.Fatal("row 16896 of 16896 was read")
	}
	tables.Prefetch(0, ids) // never taken: Close waits for it
}

// TestQwen38SnapshotRestore: a qwen4_exp session restored from a snapshot
// (the server's prompt cache) continues bitwise as the session it was
// taken from.
func TestQwen38SnapshotRestore(t *testing.T) {
	e, err := Load(install(t, qwen38Layouts[0], 16), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := loadRefs(t, "tiny-qwen38.refs.json")[3].IDs // the EOS at 11 lies in the restored prefix
	a := e.NewSession(SessionOptions{})
	if err := a.Prefill(context.Background(), p[:14], 0); err != nil {
		t.Fatal(err)
	}
	snap := a.Snapshot()
	if snap == nil || snap.Len() != 14 || snap.Bytes() <= 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	gen := func(s *Session) []float32 {
		var rows []float32
		if _, err := s.Generate(context.Background(), p[14:], GenerateOptions{MaxTokens: 8, IgnoreEOS: true,
			OnLogits: func(row []float32) error { rows = append(rows, row...); return nil }}); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	want := gen(a)
	b := e.NewSession(SessionOptions{})
	if _, err := b.Generate(context.Background(), p[:3], GenerateOptions{MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 14 {
		t.Fatalf("restored session holds %d tokens, want 14", b.Len())
	}
	if i := firstBitDiff(gen(b), want); i >= 0 {
		t.Fatalf("logit %d differs after Restore", i)
	}
}

// TestQwen38KVWidths: a qwen4_exp session takes the default KV width of
// qwen35 (8 bits) and --kv-bits 16 and 32; at every width its snapshot,
// written as the disk prompt cache writes it and read back by a fresh
// session, restores a session that generates what the original does, and
// a session of another width refuses it, from RAM and from disk, naming
// both widths. The footprint counts the KV at the width.
func TestQwen38KVWidths(t *testing.T) {
	e, err := Load(install(t, qwen38Layouts[0], 16), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if w, ok := e.NewSession(SessionOptions{}).st.(model.KVWidth); !ok || w.KVBits() != qwen35.DefaultKVBits {
		t.Errorf("default KV width: %v (a model.KVWidth: %v), qwen35's %d", w, ok, qwen35.DefaultKVBits)
	}
	p := loadRefs(t, "tiny-qwen38.refs.json")[5].IDs
	var kv [33]int64
	for _, bits := range []int{32, 16, 8} {
		t.Run(fmt.Sprintf("kv%d", bits), func(t *testing.T) {
			f, err := ComputeFootprint(e.Install, FootprintOptions{KVBits: bits, MaxContext: 4096})
			if err != nil || f.KVBits != bits {
				t.Fatalf("footprint %+v, %v", f, err)
			}
			kv[bits] = f.KV
			opt := SessionOptions{KVBits: bits}
			buf, snap := snapshotRoundTrip(t, e, opt, p, 3)
			other := 8
			if bits == other {
				other = 16
			}
			wrong := fmt.Sprintf("%d-bit, this session's %d-bit", bits, other)
			if _, err := e.NewSession(SessionOptions{KVBits: other}).ReadSnapshot(bytes.NewReader(buf.Bytes())); err == nil || !strings.Contains(err.Error(), wrong) {
				t.Errorf("a %d-bit session reading a %d-bit snapshot: %v", other, bits, err)
			}
			if err := e.NewSession(SessionOptions{KVBits: other}).Restore(snap); err == nil || !strings.Contains(err.Error(), wrong) {
				t.Errorf("a %d-bit session restoring a %d-bit snapshot: %v", other, bits, err)
			}
		})
	}
	if !(kv[8] < kv[16] && kv[16] < kv[32]) {
		t.Errorf("footprint KV at 8, 16, 32 bits: %d, %d, %d", kv[8], kv[16], kv[32])
	}
}
