package download

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOfflineFromEnvironment(t *testing.T) {
	for v, want := range map[string]bool{
		"1": true, "true": true, "YES": true, "on": true, " 1 ": true,
		"": false, "0": false, "false": false, "no": false, "offline": false,
	} {
		t.Setenv("HF_HUB_OFFLINE", v)
		if got := OfflineFromEnvironment(); got != want {
			t.Errorf("HF_HUB_OFFLINE=%q: offline %v, want %v", v, got, want)
		}
		if got := NewClient().Offline; got != want {
			t.Errorf("HF_HUB_OFFLINE=%q: NewClient().Offline %v, want %v", v, got, want)
		}
	}
}

// An offline client finds a snapshot downloaded earlier by branch or by
// commit, and makes no request at all.
func TestOfflineSnapshotFromTheCacheMakesNoRequest(t *testing.T) {
	h, commit, files := newTestHub(t)
	c := testClient(t, h)
	cache := t.TempDir()
	if _, err := snapshot(t, c, cache, nil); err != nil {
		t.Fatal(err)
	}
	h.ResetRequests()
	h.ForbidRequests(t)
	c.Offline = true
	for _, rev := range []string{"main", commit} {
		snap, err := c.Snapshot(context.Background(), testRepo, rev, SnapshotOptions{CacheDir: cache})
		if err != nil {
			t.Fatalf("offline @%s: %v", rev, err)
		}
		if snap.Commit != commit || snap.Dir != SnapshotDir(cache, testRepo, commit) || len(snap.Files) != len(files) {
			t.Errorf("offline @%s: %+v", rev, snap)
		}
		checkSnapshot(t, snap.Dir, files)
	}
	if _, err := c.ResolveRevision(context.Background(), testRepo, "main"); !errors.Is(err, ErrOffline) {
		t.Errorf("offline ResolveRevision: %v, want ErrOffline", err)
	}
	if n := len(h.Requests()); n != 0 {
		t.Errorf("offline mode made %d requests: %+v", n, h.Requests())
	}
}

// Each way the cache can fall short is reported with what is missing.
func TestOfflineSnapshotSaysWhatIsMissing(t *testing.T) {
	h, commit, _ := newTestHub(t)
	c := testClient(t, h)
	cache := t.TempDir()
	if _, err := snapshot(t, c, cache, nil); err != nil {
		t.Fatal(err)
	}
	root := RepoCacheDir(cache, testRepo)
	other := strings.Repeat("ab", 20)
	tests := []struct {
		name, repo, rev string
		damage          func(t *testing.T)
		want            []string
	}{
		{"repo never downloaded", "acme/other", "main", nil, []string{"acme/other@main", "no " + RepoCacheDir(cache, "acme/other")}},
		{"branch without a ref", testRepo, "dev", nil, []string{"no " + filepath.Join(root, "refs", "dev"), commit, "--revision"}},
		{"commit not in the cache", testRepo, other, nil, []string{"no " + filepath.Join(root, "snapshots", other)}},
		{"ref that is not a commit", testRepo, "main", func(t *testing.T) {
			writeFile(t, filepath.Join(root, "refs", "main"), "garbage")
		}, []string{`holds "garbage"`}},
		{"no config.json", testRepo, commit, func(t *testing.T) {
			os.Remove(filepath.Join(root, "snapshots", commit, "config.json"))
		}, []string{"has no config.json"}},
		{"blob deleted", testRepo, commit, func(t *testing.T) {
			os.Remove(filepath.Join(root, "blobs", sha256Hex(testFiles()[bigFile])))
		}, []string{bigFile, "missing blob"}},
	}
	h.ResetRequests()
	h.ForbidRequests(t)
	c.Offline = true
	// The cases damage the cache cumulatively, in this order.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.damage != nil {
				tc.damage(t)
			}
			_, err := c.Snapshot(context.Background(), tc.repo, tc.rev, SnapshotOptions{CacheDir: cache})
			var oe *OfflineError
			if !errors.As(err, &oe) || !errors.Is(err, ErrOffline) {
				t.Fatalf("got %v, want an *OfflineError", err)
			}
			for _, w := range append(tc.want, "download it once with network access") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	if n := len(h.Requests()); n != 0 {
		t.Errorf("offline failures made requests: %+v", h.Requests())
	}
}

// A snapshot fetched by commit records the branch it came from when asked,
// so an offline run by branch finds it.
func TestSnapshotByCommitRecordsTheRef(t *testing.T) {
	h, commit, _ := newTestHub(t)
	c := testClient(t, h)
	cache := t.TempDir()
	if _, err := c.Snapshot(context.Background(), testRepo, commit, SnapshotOptions{CacheDir: cache, Ref: "main"}); err != nil {
		t.Fatal(err)
	}
	if got, err := LocalCommit(cache, testRepo, "main"); err != nil || got != commit {
		t.Errorf("LocalCommit(main) = %s, %v; want %s", got, err, commit)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
