package verify

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/nvmai/nvmai/internal/filehash"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// maxModelsDepth bounds how deep the gate looks into the models directory,
// following symbolic links (installs are often links to another disk): deep
// enough for MODELS/family/install/experts/layer.bin, and a bound on a link
// cycle.
const maxModelsDepth = 8

// fingerprint describes a directory tree: for every entry, keyed by its
// slash path, its type, size and modification time, a link's target, and the
// sha256 of every receipt. Two fingerprints differ when anything was added,
// removed, resized, rewritten or re-linked.
type fingerprint map[string]string

func takeFingerprint(root string) (fingerprint, error) {
	fp := fingerprint{}
	return fp, fp.walk(root, ".", 0)
}

func (fp fingerprint) walk(root, rel string, depth int) error {
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := path.Join(rel, e.Name())
		full := filepath.Join(root, filepath.FromSlash(name))
		li, err := os.Lstat(full)
		if err != nil {
			return err
		}
		desc := ""
		if li.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(full)
			if err != nil {
				return err
			}
			desc = "link to " + target + "; "
		}
		fi, err := os.Stat(full)
		if err != nil {
			fp[name] = desc + "dangling"
			continue
		}
		desc += fmt.Sprintf("%s %d bytes, modified %d", fi.Mode().Type(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() && e.Name() == packexperts.ReceiptFile {
			_, sum, err := filehash.SHA256(full)
			if err != nil {
				return err
			}
			desc += ", sha256 " + sum
		}
		fp[name] = desc
		if fi.IsDir() && depth+1 < maxModelsDepth {
			if err := fp.walk(root, name, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// changes lists what differs from before to after, one line a path.
func (before fingerprint) changes(after fingerprint) []string {
	var out []string
	for p, b := range before {
		switch a, ok := after[p]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: removed (was %s)", p, b))
		case a != b:
			out = append(out, fmt.Sprintf("%s: was %s, now %s", p, b, a))
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok {
			out = append(out, fmt.Sprintf("%s: added (%s)", p, a))
		}
	}
	sort.Strings(out)
	return out
}

// findInstalls lists, relative to modelsDir with '/' separators, every
// directory holding a manifest.json. Hidden entries (a converter's staging
// folder) are not installs; an install's own subfolders are not searched.
func findInstalls(modelsDir string) ([]string, error) {
	var out []string
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		dir := filepath.Join(modelsDir, filepath.FromSlash(rel))
		if fi, err := os.Stat(filepath.Join(dir, packexperts.ManifestFile)); err == nil && fi.Mode().IsRegular() && rel != "." {
			out = append(out, rel)
			return nil
		}
		if depth >= maxModelsDepth {
			return nil
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name()[0] == '.' {
				continue
			}
			if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && fi.IsDir() {
				if err := walk(path.Join(rel, e.Name()), depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(".", 0)
	sort.Strings(out)
	return out, err
}
