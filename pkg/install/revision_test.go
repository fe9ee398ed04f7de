package install

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

// repoFiles reads the embedded model as a fake Hub repository; extra files
// give the same model another commit.
func repoFiles(t *testing.T, extra map[string]string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	entries, err := os.ReadDir(embeddedModel(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(embeddedModel(t), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	for name, content := range extra {
		files[name] = []byte(content)
	}
	return files
}

// An existing install is compared with the commit the asked revision names
// now: a moved branch or another commit is reported with both commits and
// --overwrite, a revision that does not exist as such, and the install's
// own commit is reused without a request.
func TestExistingInstallOfAnotherRevisionIsReported(t *testing.T) {
	h := fakehub.New(t, fakehub.Options{})
	oldCommit := h.AddRepo(repo, repoFiles(t, nil), fakehub.RepoOptions{})
	client := testClient(t, h)
	opt := Options{ModelsDir: t.TempDir(), CacheDir: t.TempDir(), Client: client, Threads: 2}
	entry, _ := CustomEntry(repo, "main")
	if _, err := Run(context.Background(), entry, []int{4}, opt); err != nil {
		t.Fatal(err)
	}
	newCommit := h.AddRepo(repo, repoFiles(t, map[string]string{"README.md": "moved"}), fakehub.RepoOptions{})

	tests := []struct {
		name, revision string
		offline        bool
		want           []string // in the error; none means reused
		requests       int
	}{
		{"branch moved", "main", false, []string{"at commit " + oldCommit, "revision main is commit " + newCommit, "--overwrite", "--revision " + oldCommit}, 1},
		{"no such branch", "nosuchbranch", false, []string{`revision "nosuchbranch" does not exist`}, 1},
		{"the install's own commit", oldCommit, false, nil, 0},
		{"another commit", newCommit, false, []string{"at commit " + oldCommit, "you asked for commit " + newCommit}, 1},
		{"offline, refs/main still at the install's commit", "main", true, nil, 0},
		{"offline, unknown branch", "dev", true, []string{"refs/dev", "built from commit " + oldCommit}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.ResetRequests()
			client.Offline = tc.offline
			entry, _ := CustomEntry(repo, tc.revision)
			results, err := Run(context.Background(), entry, []int{4}, opt)
			if n := len(h.Requests()); n != tc.requests {
				t.Errorf("%d requests, want %d: %+v", n, tc.requests, h.Requests())
			}
			if tc.want == nil {
				if err != nil || len(results) != 1 || !results[0].Reused || results[0].Commit != oldCommit {
					t.Fatalf("got %+v, %v; want the install reused", results, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %+v, want an error", results)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	// --overwrite replaces the install with the new commit.
	client.Offline = false
	opt.Overwrite = true
	results, err := Run(context.Background(), entry, []int{4}, opt)
	if err != nil || len(results) != 1 || results[0].Commit != newCommit || results[0].Reused {
		t.Fatalf("--overwrite: %+v, %v", results, err)
	}
}

// A folder under the entry's name that holds another model is not taken
// for it.
func TestExistingInstallOfAnotherModelIsReported(t *testing.T) {
	cacheDir, _ := cachedSnapshot(t)
	models := t.TempDir()
	entry, _ := CustomEntry(repo, "main")
	opt := Options{ModelsDir: models, CacheDir: cacheDir, Client: hubThatMustNotBeCalled(t), Offline: true, Threads: 2}
	if _, err := Run(context.Background(), entry, []int{4}, opt); err != nil {
		t.Fatal(err)
	}
	other, _ := CustomEntry("someone/else", "main")
	other.Name = entry.Name // the same folder name
	_, err := Run(context.Background(), other, []int{4}, opt)
	if err == nil || errors.Is(err, ErrRevisionDiffers) || !strings.Contains(err.Error(), "holds an install of "+repo+", not someone/else") {
		t.Errorf("got %v", err)
	}
}
