package runtime

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/models/qwen35"
)

// TestSnapshotCodecRoundTrip: at every KV width, a snapshot taken after a
// reply (so it holds a pending token), written, read by a fresh session of
// the same engine and restored, generates the greedy tokens the original
// session generates.
func TestSnapshotCodecRoundTrip(t *testing.T) {
	e, err := Load(install(t, "tiny-moe-fused", 8), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := loadRefs(t, "tiny-moe.refs.json")[1]
	for _, bits := range []int{qwen35.KVFloat32, qwen35.KVBF16, qwen35.KVInt8} {
		t.Run(fmt.Sprintf("kv%d", bits), func(t *testing.T) {
			opt := SessionOptions{KVBits: bits}
			buf, _ := snapshotRoundTrip(t, e, opt, p.IDs, 4)
			other := qwen35.KVInt8
			if bits == other {
				other = qwen35.KVBF16
			}
			if _, err := e.NewSession(SessionOptions{KVBits: other}).ReadSnapshot(bytes.NewReader(buf.Bytes())); err == nil {
				t.Errorf("a %d-bit snapshot was read by a %d-bit session", bits, other)
			}
		})
	}
}

// snapshotRoundTrip generates gen tokens from prompt in a session of opt,
// writes its snapshot (taken after the reply, so it holds a pending token),
// reads it in a fresh session and restores it there, and fails t unless
// both sessions then generate the same 8 greedy tokens. It returns the
// written bytes and the snapshot.
func snapshotRoundTrip(t *testing.T, e *Engine, opt SessionOptions, prompt []int, gen int) (*bytes.Buffer, *Snapshot) {
	t.Helper()
	ctx := context.Background()
	orig := e.NewSession(opt)
	if _, err := orig.Generate(ctx, prompt, GenerateOptions{MaxTokens: gen, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	snap := orig.Snapshot()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	fresh := e.NewSession(opt)
	got, err := fresh.ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != snap.Len() || got.Bytes() != snap.Bytes() {
		t.Fatalf("read snapshot: %d tokens, %d bytes; written %d, %d", got.Len(), got.Bytes(), snap.Len(), snap.Bytes())
	}
	if err := fresh.Restore(got); err != nil {
		t.Fatal(err)
	}
	want, err := orig.Generate(ctx, nil, GenerateOptions{MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := fresh.Generate(ctx, nil, GenerateOptions{MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, want.IDs) {
		t.Fatalf("restored session generates %v, the original %v", res.IDs, want.IDs)
	}
	return &buf, snap
}

// FuzzReadSnapshot: whatever the bytes, ReadSnapshot returns a snapshot or
// an error.
func FuzzReadSnapshot(f *testing.F) {
	e, err := Load(install(f, "tiny-moe-fused", 8), Options{Threads: 1})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close()
	s := e.NewSession(SessionOptions{MaxContext: 64})
	if err := s.Prefill(context.Background(), []int{1, 2, 3}, 0); err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:30])
	f.Fuzz(func(t *testing.T, b []byte) {
		sn, err := s.ReadSnapshot(bytes.NewReader(b))
		if (sn == nil) == (err == nil) {
			t.Fatalf("snapshot %v, error %v", sn != nil, err)
		}
	})
}
