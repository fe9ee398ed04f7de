package install

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/download"
	"github.com/nvmai/nvmai/pkg/download/fakehub"
	"github.com/nvmai/nvmai/pkg/registry"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/verify"
)

const repo = "nvmai/tiny-moe"

func embeddedModel(t *testing.T) string {
	t.Helper()
	return testfix.Embedded(t)
}

func testClient(t *testing.T, h *fakehub.Hub) *download.Client {
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	c := download.NewClient()
	c.Endpoint, c.Token = h.URL, ""
	c.ChunkSize, c.Parallel = 1<<20, 3
	c.RetryWaitMin, c.RetryWaitMax, c.RetryAfterMax = time.Millisecond, 20*time.Millisecond, 50*time.Millisecond
	c.FreeSpace = func(string) (uint64, error) { return 1 << 40, nil }
	return c
}

// The embedded default model goes through the fake Hub at both widths from
// one download, each install verifies, and each generates the reference text.
func TestInstallThroughFakeHubAndGenerate(t *testing.T) {
	h := fakehub.New(t, fakehub.Options{})
	h.AddRepoDir(t, repo, embeddedModel(t), fakehub.RepoOptions{})
	entry, err := CustomEntry(repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{ModelsDir: t.TempDir(), CacheDir: t.TempDir(), Client: testClient(t, h), Threads: 2}
	results, err := Run(context.Background(), entry, []int{4, 8}, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("results %+v", results)
	}
	for _, r := range results {
		e, err := runtime.Load(r.Dir, runtime.Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.NewSession(runtime.SessionOptions{}).Generate(context.Background(), e.Tokenizer.Encode("Once upon a"), runtime.GenerateOptions{MaxTokens: 12, StopIDs: e.EOSIDs()})
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Text, " time, there was a little robot") {
			t.Errorf("%d-bit install generated %q", r.Width, res.Text)
		}
	}
	// A second run resolves the revision (to compare it with the installs'),
	// reuses the verified installs and downloads nothing.
	h.ResetRequests()
	again, err := Run(context.Background(), entry, []int{4, 8}, opt)
	if err != nil || len(again) != 2 || !again[0].Reused || !again[1].Reused {
		t.Fatalf("second run: %+v, %v", again, err)
	}
	if reqs := h.Requests(); len(reqs) != 1 || !strings.Contains(reqs[0].Path, "/revision/main") {
		t.Errorf("second run made requests %+v, want only the revision lookup", reqs)
	}
	// A new width later reuses the cached snapshot: no file data is fetched again.
	h.ResetRequests()
	if _, err := Run(context.Background(), entry, []int{16}, opt); err != nil {
		t.Fatal(err)
	}
	for _, r := range h.Requests() {
		if r.Server == "cdn" || (r.Method == "GET" && strings.Contains(r.Path, "/resolve/")) {
			t.Errorf("16-bit install re-fetched %s from %s", r.Path, r.Server)
		}
	}
}

func TestUnsupportedEntryRefused(t *testing.T) {
	for _, e := range registry.All() {
		if e.Supported {
			continue
		}
		_, err := Run(context.Background(), e, []int{4}, Options{ModelsDir: t.TempDir()})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), e.Reason) {
			t.Errorf("%s: got %v", e.Name, err)
		}
	}
}

func TestWanted(t *testing.T) {
	for p, want := range map[string]bool{
		"config.json": true, "model-00001-of-00004.safetensors": true, "model.safetensors.index.json": true,
		"tokenizer.json": true, "README.md": false, "images/x.png": false, "sub/model.safetensors": false,
		"original/consolidated.pth": false,
	} {
		if Wanted(p) != want {
			t.Errorf("Wanted(%q) = %v", p, !want)
		}
	}
}

// The golden gate finds registry installs where nvmai-install puts them.
func TestInstallDirAgreesWithGoldenGate(t *testing.T) {
	for _, w := range []int{4, 8, 16} {
		if got, want := Dir("m", "katcoder", w), filepath.Join("m", verify.RegistryInstallDir("katcoder", w)); got != want {
			t.Errorf("install.Dir = %s, golden gate expects %s", got, want)
		}
	}
}
