package verify

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/convert"
)

// sharedModels holds one conversion of the embedded model at 4, 8 and 16
// bits, shared by every test (converting under -race takes seconds). Tests
// never modify it: they copy what they tamper with.
var sharedModels struct {
	once sync.Once
	root string // a models directory holding tiny-moe-{4,8,16}bit
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedModels.root != "" {
		os.RemoveAll(sharedModels.root)
	}
	os.Exit(code)
}

// repoRoot walks up from the package directory to go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	return testfix.RepoRoot(t)
}

// embeddedModels returns a models directory with the embedded model
// converted to tiny-moe-4bit, -8bit and -16bit, as scripts/demo.sh names them.
func embeddedModels(t testing.TB) string {
	t.Helper()
	src := filepath.Join(repoRoot(t), "testdata", "tiny-moe-fused")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("embedded model %s not available: %v", src, err)
	}
	sharedModels.once.Do(func() {
		root, err := os.MkdirTemp("", "nvmai-verify-models-*")
		if err != nil {
			sharedModels.err = err
			return
		}
		sharedModels.root = root
		_, sharedModels.err = convert.Run(context.Background(), convert.Options{
			Input:   src,
			Targets: convert.Targets(filepath.Join(root, "tiny-moe"), []int{4, 8, 16}),
			Tool:    "nvmai-verify tests",
		})
	})
	if sharedModels.err != nil {
		t.Fatalf("converting %s: %v", src, sharedModels.err)
	}
	return sharedModels.root
}

// installCopy copies the shared install of the given width into a fresh
// temporary directory and returns the copy's path.
func installCopy(t testing.TB, bits int) string {
	t.Helper()
	name := fmt.Sprintf("tiny-moe-%dbit", bits)
	dst := filepath.Join(t.TempDir(), name)
	copyTree(t, filepath.Join(embeddedModels(t), name), dst)
	return dst
}

func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
