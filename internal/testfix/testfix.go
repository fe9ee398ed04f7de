// Package testfix locates the repository and the shared reference fixtures
// for tests, reads the fixtures' reference prompts and holds the small
// comparisons the tests make against them, so every package finds and
// checks them the same way.
package testfix

import (
	"encoding/json"
	"math"
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

// Dev returns the dev fixture NAME, ../shared/fixtures/dev/NAME next to
// the repository (Shared), skipping the test when it is absent.
func Dev(t testing.TB, name string) string {
	t.Helper()
	return Shared(t, "dev/"+name)
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

// RefPrompt is one prompt of a transformers *.refs.json fixture; each
// fixture fills the fields it records.
type RefPrompt struct {
	Text                 string    `json:"text"`
	IDs                  []int     `json:"ids"`
	LastLogits           []float32 `json:"last_logits"`
	ArgmaxPerPosition    []int     `json:"argmax_per_position"`
	LogsumexpPerPosition []float64 `json:"logsumexp_per_position"`
	Greedy               []int     `json:"greedy"`
	GreedyText           string    `json:"greedy_text"`
}

// LoadRefs reads the prompts of the refs file at path.
func LoadRefs(t testing.TB, path string) []RefPrompt {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Prompts []RefPrompt `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return refs.Prompts
}

// Argmax returns the index of the largest value of x (the first of equals).
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// Logsumexp returns log Σ exp(x), computed in float64 about the maximum.
func Logsumexp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

// MaxAbsDiff returns max |a[i] − b[i]| over the elements of a, in float64.
func MaxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// BitwiseDiff returns the first index where a and b differ bitwise, or −1.
func BitwiseDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// Quick reports whether to run a package's reduced test set: under the
// race detector (race, the package's build-tagged constant) or -short,
// unless NVMAI_LONG_TESTS is set.
func Quick(race bool) bool {
	if os.Getenv("NVMAI_LONG_TESTS") != "" {
		return false
	}
	return race || testing.Short()
}

// Middle, as FlipByte's offset, names the file's middle byte.
const Middle = -1

// FlipByte flips the bits of mask in the byte at offset off (or the middle
// byte: Middle) of the file at path, in place, for tests of what a damaged
// file does.
func FlipByte(t testing.TB, path string, off int64, mask byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if off == Middle {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		off = fi.Size() / 2
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= mask
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}
