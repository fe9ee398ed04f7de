package filehash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSHA256(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"", "abc", string(make([]byte, 1<<20+3))} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		size, sum, err := SHA256(p)
		want := sha256.Sum256([]byte(content))
		if err != nil || size != int64(len(content)) || sum != hex.EncodeToString(want[:]) {
			t.Fatalf("SHA256 of %d bytes = %d, %s, %v", len(content), size, sum, err)
		}
	}
	if _, _, err := SHA256(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v, want a not-exist error", err)
	}
}

func TestSHA256ContextStops(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := SHA256Context(ctx, p); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled hash: %v, want context.Canceled", err)
	}
}
