package filehash

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe C9: hashing a FIFO put where a payload belongs is refused at once.
func TestSHA256RefusesFIFOWithoutBlocking(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resident.bin")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := SHA256(p)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("SHA256(FIFO) = %v; want a refusal naming %s", err, p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SHA256 blocked on a FIFO")
	}
}
