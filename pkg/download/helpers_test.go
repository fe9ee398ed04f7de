package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

const (
	// stallTestWindow is the stall window of the tests that provoke stalls.
	stallTestWindow = 200 * time.Millisecond
	testChunk       = 64 << 10
	testRepo        = "acme/tiny"
)

// testClient is tuned for loopback: small chunks, a stall floor that a
// healthy local transfer clears by orders of magnitude even on a loaded
// machine under -race, millisecond backoff. Stall tests shorten the window.
func testClient(t *testing.T, h *fakehub.Hub) *Client {
	t.Helper()
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir()) // no token file from the real home
	c := NewClient()
	c.Endpoint = h.URL
	c.Token = ""
	c.ChunkSize = testChunk
	c.Parallel = 3
	c.StallBytes = 16 << 10
	c.StallWindow = time.Second
	c.MaxRetries = 4
	c.RetryWaitMin, c.RetryWaitMax, c.RetryAfterMax = time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	c.HeaderTimeout = 5 * time.Second
	c.FreeSpace = func(string) (uint64, error) { return 1 << 40, nil }
	return c
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// testFiles: two multi-chunk LFS shards (sizes not multiples of the chunk),
// a single-chunk LFS file in a subfolder, small git files and an empty one.
func testFiles() map[string][]byte {
	return map[string][]byte{
		"model-00001-of-00002.safetensors": randomBytes(1, 5*testChunk+7),
		"model-00002-of-00002.safetensors": randomBytes(2, 3*testChunk),
		"tokenizer/tokenizer.json":         randomBytes(3, 20<<10),
		"config.json":                      []byte(`{"model_type":"qwen3_5_moe"}`),
		"generation_config.json":           []byte(`{"temperature":0.7}`),
		"empty.txt":                        {},
	}
}

const bigFile = "model-00001-of-00002.safetensors"

func newTestHub(t *testing.T) (*fakehub.Hub, string, map[string][]byte) {
	h := fakehub.New(t, fakehub.Options{})
	files := testFiles()
	return h, h.AddRepo(testRepo, files, fakehub.RepoOptions{}), files
}

// oneBigFileHub serves one repository holding bigFile, n random bytes
// (seed), to a client that fetches one chunk at a time into a new cache.
func oneBigFileHub(t *testing.T, seed uint64, n int) (h *fakehub.Hub, c *Client, cache string, content []byte) {
	t.Helper()
	h = fakehub.New(t, fakehub.Options{})
	content = randomBytes(seed, n)
	h.AddRepo(testRepo, map[string][]byte{bigFile: content}, fakehub.RepoOptions{})
	c = testClient(t, h)
	c.Parallel = 1
	return h, c, t.TempDir(), content
}

// downloadedHub is newTestHub with its repository already downloaded once
// by a test client into a new cache: the client and the cache come back too.
func downloadedHub(t *testing.T) (h *fakehub.Hub, c *Client, cache, commit string, files map[string][]byte) {
	t.Helper()
	h, commit, files = newTestHub(t)
	c = testClient(t, h)
	cache = t.TempDir()
	if _, err := snapshot(t, c, cache, nil); err != nil {
		t.Fatal(err)
	}
	return h, c, cache, commit, files
}

// checkSnapshot asserts every file is in the snapshot with its bytes.
func checkSnapshot(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes differ from the %d served", p, len(got), len(want))
		}
	}
}

// assertAbsent fails if path exists (even as a dangling symlink).
func assertAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s exists after a failed download (err=%v)", path, err)
	}
}

// dataRequests are the requests that move file bytes or locate them.
func dataRequests(log []fakehub.Request) []fakehub.Request {
	var out []fakehub.Request
	for _, r := range log {
		if r.Server == "cdn" || strings.Contains(r.Path, "/resolve/") || strings.Contains(r.Path, "/resolve-cache/") {
			out = append(out, r)
		}
	}
	return out
}

// cdnGets returns the Range headers of the CDN GETs for file.
func cdnGets(log []fakehub.Request, file string) []string {
	var out []string
	for _, r := range log {
		if r.Server == "cdn" && r.Method == "GET" && r.File == file {
			out = append(out, r.Range)
		}
	}
	return out
}

// recorder is a Progress that keeps what it is told.
type recorder struct {
	mu       sync.Mutex
	plan     Plan
	bytes    atomic.Int64
	done     map[string]bool // path → reused
	retries  int
	onBytes  func(total int64)
	lastErrs []error
}

func (r *recorder) Plan(p Plan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plan = p
	r.bytes.Store(p.ResumedBytes)
}

func (r *recorder) Transferred(n int64) {
	total := r.bytes.Add(n)
	if r.onBytes != nil {
		r.onBytes(total)
	}
}

func (r *recorder) FileDone(path string, _ int64, reused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = map[string]bool{}
	}
	r.done[path] = reused
}

func (r *recorder) Retrying(_ string, _ int64, _ int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries++
	r.lastErrs = append(r.lastErrs, err)
}

func snapshot(t *testing.T, c *Client, cacheDir string, p Progress) (*Snapshot, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Snapshot(ctx, testRepo, "main", SnapshotOptions{CacheDir: cacheDir, Progress: p})
}

var errContextCanceled = context.Canceled

func contextWithTimeout(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, cancel
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// rangeOf is the Range header for chunk i of a file of size bytes.
func rangeOf(i, size int) string {
	start, end := chunkRange(i, int64(size), testChunk)
	return fmt.Sprintf("bytes=%d-%d", start, end)
}

func readJournal(t *testing.T, path string) journal {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

func journaledChunks(j journal) string {
	var done []string
	for i, h := range j.Chunks {
		if h != "" {
			done = append(done, strconv.Itoa(i))
		}
	}
	return strings.Join(done, ",")
}

// fixtureDir finds shared/fixtures/<rel> next to the repository root (the
// folder holding go.mod), or skips.
func fixtureDir(t *testing.T, rel string) string {
	t.Helper()
	return testfix.Shared(t, rel)
}
