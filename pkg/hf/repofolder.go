package hf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
)

// refsMainLimit bounds refs/main, which holds one commit hash.
const refsMainLimit = 1024

// RepoFolderSnapshot recognises a Hugging Face cache repo folder
// (models--ORG--NAME holding refs/main and snapshots/) and returns the
// snapshot directory refs/main names and the commit. ok is false for any
// other directory.
func RepoFolderSnapshot(dir string) (snapshot, commit string, ok bool, err error) {
	if !strings.HasPrefix(filepath.Base(filepath.Clean(dir)), "models--") {
		return "", "", false, nil
	}
	raw, err := limits.ReadFile(filepath.Join(dir, "refs", "main"), refsMainLimit)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	commit = strings.TrimSpace(string(raw))
	if commit == "" || strings.ContainsAny(commit, `/\`) || commit == "." || commit == ".." {
		return "", "", false, fmt.Errorf("%s: refs/main holds %q, not a commit", dir, commit)
	}
	snapshot = filepath.Join(dir, "snapshots", commit)
	if fi, err := os.Stat(snapshot); err != nil || !fi.IsDir() {
		return "", "", false, fmt.Errorf("%s: refs/main names commit %s, but snapshots/%s is missing; the download is incomplete", dir, commit, commit)
	}
	return snapshot, commit, true, nil
}
