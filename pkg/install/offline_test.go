package install

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/download"
	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

// offlineHub downloads the embedded model through a fake Hub into a fresh
// cache, as an earlier online run would, then forbids every request: the
// returned client talks to a Hub that fails the test if it is called.
func offlineHub(t *testing.T) (client *download.Client, cacheDir, commit string) {
	t.Helper()
	h := fakehub.New(t, fakehub.Options{})
	commit = h.AddRepoDir(t, repo, embeddedModel(t), fakehub.RepoOptions{})
	cacheDir = t.TempDir()
	client = testClient(t, h)
	_, err := client.Snapshot(context.Background(), repo, "main",
		download.SnapshotOptions{Include: Wanted, CacheDir: cacheDir})
	if err != nil {
		t.Fatal(err)
	}
	h.ForbidRequests(t)
	return client, cacheDir, commit
}

// cachedSnapshot is offlineHub's cache and commit.
func cachedSnapshot(t *testing.T) (cacheDir, commit string) {
	t.Helper()
	_, cacheDir, commit = offlineHub(t)
	return cacheDir, commit
}

// hubThatMustNotBeCalled is a client of a fake Hub that fails the test on
// any request.
func hubThatMustNotBeCalled(t *testing.T) *download.Client {
	t.Helper()
	h := fakehub.New(t, fakehub.Options{})
	h.ForbidRequests(t)
	return testClient(t, h)
}

// Offline, by branch (through refs/main), by commit, and through
// HF_HUB_OFFLINE, the install is converted from the cache without one
// request; a second offline run compares and reuses it.
func TestOfflineInstallMakesNoRequest(t *testing.T) {
	hub, cacheDir, commit := offlineHub(t)
	tests := []struct {
		name, revision string
		env            bool
	}{
		{"--offline, branch", "main", false},
		{"--offline, commit", commit, false},
		{"HF_HUB_OFFLINE=1", "main", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env {
				t.Setenv("HF_HUB_OFFLINE", "1")
			}
			client := hub
			if tc.env {
				// What nvmai-install builds: NewClient reads HF_HUB_OFFLINE.
				client = download.NewClient()
				client.Endpoint, client.FreeSpace = hub.Endpoint, hub.FreeSpace
			}
			entry, err := CustomEntry(repo, tc.revision)
			if err != nil {
				t.Fatal(err)
			}
			opt := Options{ModelsDir: t.TempDir(), CacheDir: cacheDir, Client: client, Offline: !tc.env, Threads: 2}
			for run := range 2 {
				results, err := Run(context.Background(), entry, []int{4}, opt)
				if err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
				if len(results) != 1 || results[0].Commit != commit || results[0].Reused != (run == 1) {
					t.Errorf("run %d: %+v, want commit %s", run, results, commit)
				}
			}
		})
	}
}

// Offline without the snapshot in the cache says what is missing.
func TestOfflineInstallWithoutTheSnapshotSaysWhatIsMissing(t *testing.T) {
	cacheDir, _ := cachedSnapshot(t)
	tests := []struct {
		repo, revision string
		want           []string
	}{
		{"nvmai/absent", "main", []string{"nvmai/absent@main is not in the Hugging Face cache", "models--nvmai--absent"}},
		{repo, "dev", []string{"refs/dev", "the cache holds snapshots", "download it once with network access"}},
	}
	for _, tc := range tests {
		entry, _ := CustomEntry(tc.repo, tc.revision)
		_, err := Run(context.Background(), entry, []int{4},
			Options{ModelsDir: t.TempDir(), CacheDir: cacheDir, Client: hubThatMustNotBeCalled(t), Offline: true})
		if !errors.Is(err, download.ErrOffline) {
			t.Fatalf("%s@%s: got %v, want an offline error", tc.repo, tc.revision, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s@%s: error lacks %q:\n%v", tc.repo, tc.revision, w, err)
			}
		}
	}
}

// When the Hub cannot be reached, the error names the host, the cause and
// the retries (each announced as a notice), and says what the cache offers:
// the snapshot to convert by hand or with --offline, or nothing.
func TestUnreachableHubPointsAtTheCache(t *testing.T) {
	cacheDir, commit := cachedSnapshot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	tests := []struct {
		repo string
		want []string
	}{
		{repo, []string{"is in the cache: install it with --offline",
			"nvmai-convert --input " + download.SnapshotDir(cacheDir, repo, commit) + " --output ", "tiny-moe-4bit --bits 4"}},
		{"nvmai/absent", []string{"Nothing of nvmai/absent@main is in the Hugging Face cache", "--offline cannot help yet"}},
	}
	for _, tc := range tests {
		h := fakehub.New(t, fakehub.Options{})
		c := testClient(t, h)
		c.Endpoint, c.MaxRetries = "http://"+addr, 2
		var mu sync.Mutex
		var notices []string
		entry, _ := CustomEntry(tc.repo, "main")
		_, err := Run(context.Background(), entry, []int{4}, Options{ModelsDir: t.TempDir(), CacheDir: cacheDir, Client: c,
			Notice: func(m string) { mu.Lock(); notices = append(notices, m); mu.Unlock() }})
		var ne *download.NetworkError
		if !errors.As(err, &ne) {
			t.Fatalf("%s: got %v, want a *download.NetworkError", tc.repo, err)
		}
		want := append(tc.want, "cannot reach the Hub at "+addr, "(connection refused: ", "gave up after 3 attempts (2 retries)")
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", tc.repo, w, err)
			}
		}
		if len(notices) != 2 || !strings.HasPrefix(notices[0], "retry 1 of 2: GET http://"+addr) {
			t.Errorf("%s: retry notices %q", tc.repo, notices)
		}
	}
}

// A models directory too small for the installs names --models-dir, not
// the cache's settings.
func TestModelsDirShortfallNamesModelsDir(t *testing.T) {
	cacheDir, _ := cachedSnapshot(t)
	client := hubThatMustNotBeCalled(t)
	client.FreeSpace = func(string) (uint64, error) { return 1000, nil }
	entry, _ := CustomEntry(repo, "main")
	_, err := Run(context.Background(), entry, []int{4, 8},
		Options{ModelsDir: t.TempDir(), CacheDir: cacheDir, Client: client, Offline: true})
	var dse *download.DiskSpaceError
	if !errors.As(err, &dse) || !strings.Contains(err.Error(), "choose another --models-dir") || strings.Contains(err.Error(), "HF_HOME") {
		t.Errorf("got %v", err)
	}
	if _, serr := os.Stat(cacheDir); serr != nil {
		t.Fatal(serr)
	}
}

// A target that is not an nvmai install is refused before anything is
// downloaded (a 70 GB download would otherwise come first), naming what is
// there, with and without --overwrite.
func TestTargetThatIsNotAnInstallIsRefusedBeforeDownloading(t *testing.T) {
	for _, overwrite := range []bool{false, true} {
		modelsDir := t.TempDir()
		entry, err := CustomEntry(repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		target := Dir(modelsDir, entry.Name, 4)
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target+"/thesis.txt", []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		opt := Options{ModelsDir: modelsDir, CacheDir: t.TempDir(), Client: hubThatMustNotBeCalled(t), Overwrite: overwrite, Threads: 2}
		_, err = Run(context.Background(), entry, []int{4}, opt)
		if err == nil || !strings.Contains(err.Error(), "thesis.txt") {
			t.Fatalf("overwrite=%v: got %v, want a refusal naming thesis.txt", overwrite, err)
		}
		if b, _ := os.ReadFile(target + "/thesis.txt"); string(b) != "precious" {
			t.Fatalf("overwrite=%v: thesis.txt was touched", overwrite)
		}
	}
}
