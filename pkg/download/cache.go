package download

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// repoCache is one repository's folder in the Hugging Face hub cache:
//
//	models--org--name/blobs/<sha256 or git sha1>
//	models--org--name/snapshots/<commit>/<path> -> ../../blobs/<blob>
//	models--org--name/refs/<branch>              (the commit, no newline)
type repoCache struct{ root string }

func newRepoCache(cacheDir, repo string) repoCache {
	return repoCache{root: filepath.Join(cacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))}
}

func (r repoCache) blobsDir() string            { return filepath.Join(r.root, "blobs") }
func (r repoCache) blobPath(blob string) string { return filepath.Join(r.root, "blobs", blob) }
func (r repoCache) snapshotDir(commit string) string {
	return filepath.Join(r.root, "snapshots", commit)
}

func (r repoCache) snapshotPath(commit, repoPath string) string {
	return filepath.Join(r.snapshotDir(commit), filepath.FromSlash(repoPath))
}

// link points snapshots/<commit>/<path> at the blob with a relative symlink,
// as huggingface_hub does, replacing whatever was there atomically.
func (r repoCache) link(commit, repoPath, blob string) error {
	dst := r.snapshotPath(commit, repoPath)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	target := strings.Repeat("../", strings.Count(repoPath, "/")) + "../../blobs/" + blob
	tmp := dst + ".nvmai-link"
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("link %s: %w", repoPath, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", repoPath, err)
	}
	return nil
}

// writeRef records that branch or tag rev pointed at commit.
func (r repoCache) writeRef(rev, commit string) error {
	path := filepath.Join(r.root, "refs", filepath.FromSlash(rev))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeFileAtomic(path, []byte(commit))
}

// verifyFile checks that the file at path is f: its size, then its sha256
// (LFS) or git blob sha1. It returns a *VerifyError on a mismatch.
func verifyFile(path string, f RemoteFile) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	return verifyContent(file, f)
}

func verifyContent(file *os.File, f RemoteFile) error {
	st, err := file.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", file.Name())
	}
	if st.Size() != f.Size {
		return &VerifyError{Path: f.Path, What: "size", Want: strconv.FormatInt(f.Size, 10),
			Got: strconv.FormatInt(st.Size(), 10)}
	}
	h, what, want := contentHash(f, f.Size)
	if _, err := io.Copy(h, io.NewSectionReader(file, 0, f.Size)); err != nil {
		return fmt.Errorf("hash %s: %w", file.Name(), err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return &VerifyError{Path: f.Path, What: what, Want: want, Got: got}
	}
	return nil
}

// contentHash returns the hash f is named by, primed for a file of size
// bytes (sha256 for an LFS file, else git's blob sha1, whose header counts
// the bytes), its name for errors, and the hex digest f expects.
func contentHash(f RemoteFile, size int64) (h hash.Hash, what, want string) {
	if f.IsLFS() {
		return sha256.New(), "sha256", f.SHA256
	}
	h = sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	return h, "git blob sha1", f.GitOID
}

// existingCopy reports whether path already holds f. A file that exists but
// does not verify is reported as absent (and left for the caller to replace).
func existingCopy(path string, f RemoteFile) (bool, error) {
	err := verifyFile(path, f)
	var ve *VerifyError
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist), errors.As(err, &ve):
		return false, nil
	default:
		return false, err
	}
}

// placeBlob verifies the finished partial download and renames it into
// blobs/. On a mismatch the partial is deleted, never renamed.
func placeBlob(p *partial, blobPath string, f RemoteFile) error {
	if err := p.f.Sync(); err != nil {
		p.suspend()
		return fmt.Errorf("%s: sync: %w", f.Path, err)
	}
	if err := verifyContent(p.f, f); err != nil {
		p.discard()
		return err
	}
	if err := p.f.Close(); err != nil {
		p.discard()
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if err := os.Rename(p.path, blobPath); err != nil {
		p.discard()
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	os.Remove(p.journalPath)
	return syncDir(filepath.Dir(blobPath))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
