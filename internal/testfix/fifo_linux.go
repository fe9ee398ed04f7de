package testfix

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MakeFIFO puts a FIFO at path in place of the file there, if any, and
// skips the test where the filesystem cannot make one. A FIFO where a
// regular file belongs hangs a plain open(2) until a writer comes, deaf to
// Ctrl-C (probe C9), so every reader must refuse it at once.
func MakeFIFO(t testing.TB, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
}

// Within runs f and returns what it returns, failing the test with "WHAT
// blocked" when f has not returned after d: f runs on its own goroutine so
// that a call stuck in open(2) cannot hang the test binary.
func Within[T any](t testing.TB, d time.Duration, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(d):
		t.Fatalf("%s blocked", what)
		var zero T
		return zero
	}
}

// RefusesFIFO makes a FIFO called name in a temporary directory and checks
// that read, given its path, returns within 5 seconds an error that names
// the path and says it is not a regular file. fn names read in messages.
func RefusesFIFO(t testing.TB, name, fn string, read func(path string) error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	MakeFIFO(t, p)
	err := Within(t, 5*time.Second, fn+" on a FIFO", func() error { return read(p) })
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("%s(FIFO) = %v; want a refusal naming %s", fn, err, p)
	}
}
