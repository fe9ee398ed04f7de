package download

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrOffline is wrapped by every refusal to touch the network in offline
// mode and by every *OfflineError.
var ErrOffline = errors.New("offline")

// maxRefBytes bounds a refs/<revision> file: a 40-hex commit and a newline
// another tool may have added.
const maxRefBytes = 128

// OfflineFromEnvironment reports whether HF_HUB_OFFLINE asks for offline
// mode, with the spellings huggingface_hub accepts (1, ON, YES, TRUE).
func OfflineFromEnvironment() bool {
	switch strings.ToUpper(strings.TrimSpace(os.Getenv("HF_HUB_OFFLINE"))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// OfflineError says what the Hugging Face cache lacks for an offline
// install of Repo at Revision.
type OfflineError struct {
	Repo     string
	Revision string
	RepoDir  string   // models--org--name in the cache
	Missing  string   // what is not there, in words
	Commits  []string // snapshots the cache does hold for the repository
}

func (e *OfflineError) Error() string {
	msg := fmt.Sprintf("offline: %s@%s is not in the Hugging Face cache: %s", e.Repo, e.Revision, e.Missing)
	if len(e.Commits) > 0 {
		msg += fmt.Sprintf("; the cache holds snapshots %s (pass one as --revision)", strings.Join(e.Commits, ", "))
	}
	return msg + "; download it once with network access (without --offline and HF_HUB_OFFLINE)"
}

func (e *OfflineError) Unwrap() error { return ErrOffline }

// RepoCacheDir is the folder of repo in the hub cache at cacheDir
// (models--org--name).
func RepoCacheDir(cacheDir, repo string) string { return newRepoCache(cacheDir, repo).root }

// SnapshotDir is snapshots/<commit> of repo in the hub cache at cacheDir.
func SnapshotDir(cacheDir, repo, commit string) string {
	return newRepoCache(cacheDir, repo).snapshotDir(commit)
}

// LocalCommit resolves rev from the cache alone: a full commit is itself
// (when its snapshot is present), a branch or tag is what refs/<rev> records.
// It never touches the network.
func LocalCommit(cacheDir, repo, rev string) (string, error) {
	if err := validateRepoID(repo); err != nil {
		return "", err
	}
	if err := validateRevision(rev); err != nil {
		return "", err
	}
	cache := newRepoCache(cacheDir, repo)
	oe := &OfflineError{Repo: repo, Revision: rev, RepoDir: cache.root}
	if fi, err := os.Stat(cache.root); err != nil || !fi.IsDir() {
		oe.Missing = "no " + cache.root
		return "", oe
	}
	oe.Commits = cachedCommits(cache)
	commit := rev
	if !IsCommit(rev) {
		ref := filepath.Join(cache.root, "refs", filepath.FromSlash(rev))
		raw, err := readSmall(ref, maxRefBytes)
		if err != nil {
			oe.Missing = fmt.Sprintf("no %s, so the cache does not know which commit %q is", ref, rev)
			return "", oe
		}
		if commit = strings.TrimSpace(string(raw)); !IsCommit(commit) {
			oe.Missing = fmt.Sprintf("%s holds %q, not a 40-hex commit", ref, commit)
			return "", oe
		}
	}
	if !slices.Contains(oe.Commits, commit) {
		oe.Missing = "no " + cache.snapshotDir(commit)
		return "", oe
	}
	return commit, nil
}

// LocalSnapshot is Snapshot from the cache alone, for offline installs: it
// resolves rev with LocalCommit and lists the included files of the
// snapshot, which must all be readable (a link to a missing blob is an
// incomplete download). Files carry sizes, not hashes: the cache verified
// them when they were downloaded.
func LocalSnapshot(cacheDir, repo, rev string, include func(string) bool) (*Snapshot, error) {
	commit, err := LocalCommit(cacheDir, repo, rev)
	if err != nil {
		return nil, err
	}
	dir := SnapshotDir(cacheDir, repo, commit)
	files, err := localFiles(dir, include)
	if err != nil {
		return nil, &OfflineError{Repo: repo, Revision: rev, RepoDir: RepoCacheDir(cacheDir, repo), Missing: err.Error()}
	}
	return &Snapshot{Repo: repo, Commit: commit, Dir: dir, Files: files}, nil
}

func localFiles(dir string, include func(string) bool) ([]RemoteFile, error) {
	var files []RemoteFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if include != nil && !include(rel) {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s in %s points at a missing blob (an incomplete download)", rel, dir)
		}
		files = append(files, RemoteFile{Path: rel, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(files, func(f RemoteFile) bool { return f.Path == "config.json" }) {
		return nil, fmt.Errorf("%s has no config.json", dir)
	}
	return files, nil
}

func cachedCommits(cache repoCache) []string {
	entries, _ := os.ReadDir(filepath.Join(cache.root, "snapshots"))
	var out []string
	for _, e := range entries {
		if e.IsDir() && IsCommit(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s is longer than %d bytes", path, limit)
	}
	return b, err
}
