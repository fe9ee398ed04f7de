package safetensors

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe C9: Open refuses a FIFO at once instead of blocking in open(2).
func TestOpenRefusesFIFOWithoutBlocking(t *testing.T) {
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := Open(p)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("Open(FIFO) = %v; want a refusal naming %s", err, p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Open blocked on a FIFO")
	}
}
