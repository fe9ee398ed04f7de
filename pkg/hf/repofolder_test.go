package hf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepoFolderSnapshot(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	cases := []struct {
		name    string
		folder  string
		refs    string // "" = no refs/main
		snap    bool   // create snapshots/COMMIT
		ok      bool
		wantErr string
	}{
		{"a repo folder", "models--org--name", commit + "\n", true, true, ""},
		{"not named models--", "name", commit, true, false, ""},
		{"no refs/main", "models--org--name", "", true, false, ""},
		{"refs/main escapes", "models--org--name", "../x", true, false, "not a commit"},
		{"snapshot missing", "models--org--name", commit, false, false, "download is incomplete"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.folder)
			os.MkdirAll(filepath.Join(dir, "refs"), 0o755)
			if tc.refs != "" {
				os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(tc.refs), 0o644)
			}
			if tc.snap {
				os.MkdirAll(filepath.Join(dir, "snapshots", commit), 0o755)
			}
			snap, got, ok, err := RepoFolderSnapshot(dir)
			if ok != tc.ok || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ok %v err %v, want ok %v err %q", ok, err, tc.ok, tc.wantErr)
			}
			if ok && (got != commit || snap != filepath.Join(dir, "snapshots", commit)) {
				t.Errorf("snapshot %s commit %s", snap, got)
			}
		})
	}
}
