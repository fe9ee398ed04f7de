package limits

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe C9: a FIFO at manifest.json hung every reader in open(2), past
// Ctrl-C. It must be refused at once, naming the file.
func TestReadFileRefusesFIFOWithoutBlocking(t *testing.T) {
	p := filepath.Join(t.TempDir(), "manifest.json")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile(p, 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadFile(FIFO) = %v; want a refusal naming %s", err, p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile blocked on a FIFO")
	}
}
