// Package testfix locates the repository and the shared reference fixtures
// for tests, so every package finds them the same way.
package testfix

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot returns the repository root: the nearest directory above the
// test's working directory that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// Shared returns ../shared/fixtures/REL next to the repository (the
// transformers reference fixtures CI provides), skipping the test when it
// is absent.
func Shared(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), "..", "shared", "fixtures", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		t.Skipf("fixture %s absent (%v); the reference fixtures live in ../shared/fixtures next to the repository", p, err)
	}
	return p
}

// Embedded returns the embedded default model's snapshot, testdata/tiny-moe-fused.
func Embedded(t testing.TB) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "testdata", "tiny-moe-fused")
}

// CopyTree copies the regular files and directories under src to dst
// (following links), for tests that damage or move a copy of an install.
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
