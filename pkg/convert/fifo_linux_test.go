package convert

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe C9: a FIFO put where a snapshot file belongs is refused at once,
// naming it, instead of blocking the converter in open(2) past Ctrl-C.
func TestSnapshotFIFOIsRefusedAtOnce(t *testing.T) {
	for _, name := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
		"model.safetensors.index.json", "model-00001-of-00004.safetensors"} {
		t.Run(name, func(t *testing.T) {
			src := embeddedSnapshot(t)
			p := filepath.Join(src, name)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			parent := t.TempDir()
			done := make(chan error, 1)
			go func() {
				_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, filepath.Join(parent, "out")}}, Threads: 2})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), name) {
					t.Fatalf("converting with a FIFO at %s: %v; want a refusal naming it", name, err)
				}
				assertNoLeftovers(t, parent)
			case <-time.After(20 * time.Second):
				t.Fatalf("converting with a FIFO at %s blocked", name)
			}
		})
	}
}
