package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// ErrNotInstall is returned when an output directory exists and is not an
// nvmai install: nvmai never replaces what it did not write, --overwrite or not.
var ErrNotInstall = errors.New("not an nvmai install")

// notInstallError says what sits at an output that nvmai may not replace.
type notInstallError struct {
	dir  string
	what string // "it holds 3 entries: a, b, c", "it is a file, not a directory", …
}

func (e *notInstallError) Error() string {
	return fmt.Sprintf("%s exists and is not an nvmai install (%s); choose another --output or remove it yourself", e.dir, e.what)
}

func (e *notInstallError) Is(target error) bool { return target == ErrNotInstall }

// CheckOutput is the check Run and Synth apply to each output directory,
// for callers that should refuse before long work of their own (a
// download): nil when dir does not exist, or when it holds an nvmai
// install and overwrite is set; ErrExists for an install without
// overwrite; ErrNotInstall for anything else, saying what is there.
func CheckOutput(dir string, overwrite bool) error { return checkTarget(dir, overwrite) }

// checkTarget decides whether dir may become an install: it may when it does
// not exist, or with overwrite when it holds an nvmai install and nothing
// else. Anything else is refused with what is there. It runs before the
// conversion and again just before publishing, since a conversion takes
// long enough for the directory to change.
func checkTarget(dir string, overwrite bool) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--output %s: %w", dir, err)
	}
	desc, err := describeInstall(dir, fi)
	if err != nil {
		return err
	}
	if !overwrite {
		return fmt.Errorf("%w: %s holds an nvmai install (%s); pass --overwrite to replace it, or choose another --output", ErrExists, dir, desc)
	}
	return nil
}

// describeInstall returns a short description ("tiny-moe-fused, 4-bit") of
// the nvmai install at dir, or a *notInstallError saying why it is none: an
// install is a real directory whose manifest.json is an nvmai manifest, and
// which holds no file the manifest does not account for.
func describeInstall(dir string, fi fs.FileInfo) (string, error) {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(dir)
		return "", &notInstallError{dir, fmt.Sprintf("it is a symbolic link to %s; give the directory itself", target)}
	case !fi.IsDir():
		return "", &notInstallError{dir, "it is a file, not a directory"}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("--output %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return "", &notInstallError{dir, "it is an empty directory"}
	}
	m, err := readOwnManifest(dir)
	if err != nil {
		return "", &notInstallError{dir, fmt.Sprintf("%s; %s", listEntries(entries), err)}
	}
	if strays := unaccounted(dir, m); len(strays) > 0 {
		return "", &notInstallError{dir, fmt.Sprintf("it holds an nvmai install but also files nvmai did not write: %s", listNames(strays))}
	}
	return fmt.Sprintf("%s, %d-bit", m.ModelID, m.Bits), nil
}

// ownManifest is the part of a manifest that says whose it is and what the
// install holds. It is parsed leniently: a damaged install of ours is still
// ours to replace.
type ownManifest struct {
	Format  string                `json:"format"`
	ModelID string                `json:"model_id"`
	Bits    int                   `json:"bits"`
	Files   []packexperts.Payload `json:"files"`
}

func readOwnManifest(dir string) (*ownManifest, error) {
	raw, err := limits.ReadFile(filepath.Join(dir, packexperts.ManifestFile), limits.Manifest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s", packexperts.ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	var m ownManifest
	if err := json.Unmarshal(raw, &m); err != nil || m.Format != packexperts.FormatName {
		return nil, fmt.Errorf("its %s is not an nvmai manifest", packexperts.ManifestFile)
	}
	return &m, nil
}

// unaccounted lists the files under dir that an install with manifest m
// would not hold (a receipt's temporary file from an interrupted write aside).
func unaccounted(dir string, m *ownManifest) []string {
	known := map[string]bool{packexperts.ManifestFile: true, packexperts.ReceiptFile: true}
	for _, f := range m.Files {
		known[f.Name] = true
	}
	var strays []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case err != nil:
			strays = append(strays, rel+" (unreadable)")
		case d.IsDir():
		case !known[rel] && !strings.HasPrefix(rel, "."+packexperts.ReceiptFile+".tmp-"):
			strays = append(strays, rel)
		}
		return nil
	})
	sort.Strings(strays)
	return strays
}

// listEntries describes a directory's entries: "it holds 3 entries: a, b, c".
func listEntries(entries []fs.DirEntry) string {
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
		if e.IsDir() {
			names[i] += "/"
		}
	}
	noun := "entries"
	if len(names) == 1 {
		noun = "entry"
	}
	return fmt.Sprintf("it holds %d %s: %s", len(names), noun, listNames(names))
}

// listNames joins the first few names, saying how many more there are.
func listNames(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, … (%d more)", strings.Join(names[:shown], ", "), len(names)-shown)
}
