// Package fixinstall converts fixture snapshots into installs for tests,
// once per test binary, and removes them at its end. It is apart from
// package testfix so that testfix does not import the converter (whose own
// tests use testfix).
package fixinstall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
)

var installs sync.Map // "input/bits" → install dir, shared by the tests of one binary

// Install converts the Hugging Face snapshot at input into a bits-bit
// install in a fresh temporary directory the first time it is asked for,
// and returns that install's directory every time. Tests share it: they
// must not change it (copy it with testfix.CopyTree first).
func Install(t testing.TB, input string, bits int) string {
	t.Helper()
	key := fmt.Sprintf("%s/%d", input, bits)
	if dir, ok := installs.Load(key); ok {
		return dir.(string)
	}
	root, err := os.MkdirTemp("", "nvmai-test-install-")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "m")
	if _, err := convert.Run(context.Background(), convert.Options{Input: input, Targets: []convert.Target{{Bits: bits, Dir: dir}}}); err != nil {
		os.RemoveAll(root)
		t.Fatal(err)
	}
	installs.Store(key, dir)
	return dir
}

// RemoveAll deletes the installs Install made; call it from TestMain after
// m.Run.
func RemoveAll() {
	installs.Range(func(_, v any) bool { os.RemoveAll(filepath.Dir(v.(string))); return true })
}

// Main runs the tests, deletes the installs they made and exits with the
// tests' code: the whole TestMain of a package whose tests call Install.
func Main(m *testing.M) {
	code := m.Run()
	RemoveAll()
	os.Exit(code)
}
