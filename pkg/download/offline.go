package download

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nvmai/nvmai/internal/filehash"
	"github.com/nvmai/nvmai/pkg/limits"
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
// resolves rev with LocalCommit, lists the included files of the snapshot,
// which must all be readable (a link to a missing blob is an incomplete
// download), and hashes each against the name of the blob it links to
// (sha256 for LFS files, the git blob sha1 for the others), as the online
// path re-verifies what it reuses: a blob damaged since its download is
// refused (*CachedBlobError) before anything is converted from it. notice
// (nil for none) gets a line before the hashing and one per large file, so
// a long check shows progress. ctx stops the hashing.
func LocalSnapshot(ctx context.Context, cacheDir, repo, rev string, include func(string) bool, notice func(string)) (*Snapshot, error) {
	commit, err := LocalCommit(cacheDir, repo, rev)
	if err != nil {
		return nil, err
	}
	dir := SnapshotDir(cacheDir, repo, commit)
	files, err := localFiles(dir, include)
	if err != nil {
		return nil, &OfflineError{Repo: repo, Revision: rev, RepoDir: RepoCacheDir(cacheDir, repo), Missing: err.Error()}
	}
	if notice == nil {
		notice = func(string) {}
	}
	if err := verifyCached(ctx, dir, files, notice); err != nil {
		return nil, err
	}
	return &Snapshot{Repo: repo, Commit: commit, Dir: dir, Files: files}, nil
}

// CachedBlobError reports a cached file whose bytes no longer hash to the
// name of its blob: the cache copy was damaged after it was downloaded.
type CachedBlobError struct {
	Path string // in the repository
	Blob string // the blob file in the cache
	What string // "sha256" or "git blob sha1"
	Want string // the blob's name
	Got  string
}

func (e *CachedBlobError) Error() string {
	return fmt.Sprintf("offline: %s in the Hugging Face cache is damaged: its blob %s should have %s %s, its bytes have %s; "+
		"delete %s and rerun without --offline (and without HF_HUB_OFFLINE) to download it again",
		e.Path, e.Blob, e.What, e.Want, e.Got, e.Blob)
}

// bigCachedFile is the size from which verifyCached announces a file.
const bigCachedFile = 64 << 20

func verifyCached(ctx context.Context, dir string, files []RemoteFile, notice func(string)) error {
	var total int64
	n := 0
	for _, f := range files {
		if f.SHA256 != "" || f.GitOID != "" {
			total += f.Size
			n++
		}
	}
	if total >= bigCachedFile {
		notice(fmt.Sprintf("offline: checking %d cached files (%s) against their hashes", n, humanBytes(uint64(total))))
	}
	for _, f := range files {
		if f.SHA256 == "" && f.GitOID == "" {
			notice(fmt.Sprintf("offline: %s is not a link to a named blob of the cache; its bytes are not checked", f.Path))
			continue
		}
		if f.Size >= bigCachedFile {
			notice(fmt.Sprintf("offline: checking %s (%s)", f.Path, humanBytes(uint64(f.Size))))
		}
		if err := verifyCachedFile(ctx, filepath.Join(dir, filepath.FromSlash(f.Path)), f); err != nil {
			return err
		}
	}
	return nil
}

func verifyCachedFile(ctx context.Context, path string, f RemoteFile) error {
	blob, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	file, st, err := limits.OpenRegular(path)
	if err != nil {
		return err
	}
	defer file.Close()
	h, what, want := contentHash(f, st.Size())
	if _, err := io.CopyBuffer(h, filehash.ContextReader(ctx, file), make([]byte, 1<<20)); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("hashing %s: %w", blob, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return &CachedBlobError{Path: f.Path, Blob: blob, What: what, Want: want, Got: got}
	}
	return nil
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
		f := RemoteFile{Path: rel, Size: fi.Size()}
		// The cache names each blob by its content hash (the Hub's etag):
		// the file's own record of what its bytes must hash to.
		if target, err := os.Readlink(p); err == nil {
			switch blob := path.Base(filepath.ToSlash(target)); {
			case isHex(blob, 64):
				f.SHA256 = blob
			case isHex(blob, 40):
				f.GitOID = blob
			}
		}
		files = append(files, f)
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

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
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
	f, _, err := limits.OpenRegular(path)
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
