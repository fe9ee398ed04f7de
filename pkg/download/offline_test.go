package download

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/download/fakehub"
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
	h, c, cache, commit, files := downloadedHub(t)
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

// probe C11: an offline snapshot whose cached blob no longer hashes to its
// own name was converted and reported "installed and verified". Each file
// is now hashed against its blob's name (sha256 for LFS, the git blob sha1
// for the others), and a damaged one is refused, naming the file, the blob,
// both hashes and what to do.
func TestOfflineSnapshotRefusesADamagedBlob(t *testing.T) {
	cases := []struct {
		name, path, what string
		want             func(content []byte) string
	}{
		{"LFS shard", bigFile, "sha256", sha256Hex},
		{"small git file", "config.json", "git blob sha1", fakehub.GitBlobSHA1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, c, cache, commit, files := downloadedHub(t)
			snapDir := SnapshotDir(cache, testRepo, commit)
			if _, err := LocalSnapshot(context.Background(), cache, testRepo, "main", nil, nil); err != nil {
				t.Fatalf("a sound cache: %v", err)
			}
			blob, err := filepath.EvalSymlinks(filepath.Join(snapDir, tc.path))
			if err != nil {
				t.Fatal(err)
			}
			damaged := append([]byte(nil), files[tc.path]...)
			damaged[len(damaged)/2] ^= 0x01
			if err := os.WriteFile(blob, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			var notices []string
			_, err = LocalSnapshot(context.Background(), cache, testRepo, "main", nil, func(s string) { notices = append(notices, s) })
			var be *CachedBlobError
			if !errors.As(err, &be) {
				t.Fatalf("damaged %s: %v, want a *CachedBlobError", tc.path, err)
			}
			for _, w := range []string{tc.path, blob, tc.what, tc.want(files[tc.path]), tc.want(damaged), "delete " + blob, "without --offline"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			c.Offline = true
			if _, err := c.Snapshot(context.Background(), testRepo, "main", SnapshotOptions{CacheDir: cache}); !errors.As(err, &be) {
				t.Errorf("offline Client.Snapshot over a damaged blob: %v", err)
			}
		})
	}
}

// Hashing the cache stops on Ctrl-C (a cancelled context).
func TestOfflineSnapshotCheckIsInterruptible(t *testing.T) {
	h, _, _ := newTestHub(t)
	c := testClient(t, h)
	cache := t.TempDir()
	if _, err := snapshot(t, c, cache, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LocalSnapshot(ctx, cache, testRepo, "main", nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("LocalSnapshot with a cancelled context: %v", err)
	}
}
