package convert

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checkOverlap refuses an output that is the input, lies inside it, or
// holds it, and likewise for every directory the input's files link into
// (a Hugging Face cache snapshot links each file into ../../blobs) and the
// Hugging Face repo folder around a cache snapshot: publishing there would
// delete the source being read. Paths are compared after resolving
// symlinks and "..".
func checkOverlap(input string, outputs []string) error {
	protected, err := protectedDirs(input)
	if err != nil {
		return err
	}
	for _, out := range outputs {
		real, err := realPath(out)
		if err != nil {
			return fmt.Errorf("--output %s: %w", out, err)
		}
		for i, p := range protected {
			rel := relation(real, p.dir)
			if rel == "is" && i == 0 {
				return fmt.Errorf("--output %s is the --input directory %s; writing the install there would destroy the source: choose an --output outside it", out, input)
			}
			if rel != "" {
				return fmt.Errorf("--output %s %s %s, %s; writing the install there would destroy the source: choose an --output outside it", out, rel, p.dir, fmt.Sprintf(p.why, input))
			}
		}
	}
	return nil
}

type protectedDir struct {
	dir string
	why string // how the input depends on it; %s is the input
}

// protectedDirs lists the real directories the conversion reads from.
func protectedDirs(input string) ([]protectedDir, error) {
	in, err := filepath.EvalSymlinks(input)
	if err != nil {
		return nil, fmt.Errorf("--input %s: %w", input, err)
	}
	if in, err = filepath.Abs(in); err != nil {
		return nil, err
	}
	dirs := []protectedDir{{in, "which is --input %s"}}
	if parent := filepath.Dir(in); filepath.Base(parent) == "snapshots" && strings.HasPrefix(filepath.Base(filepath.Dir(parent)), "models--") {
		dirs = append(dirs, protectedDir{filepath.Dir(parent), "the Hugging Face repo folder of --input %s"})
	}
	entries, err := os.ReadDir(in)
	if err != nil {
		return nil, fmt.Errorf("--input %s: %w", input, err)
	}
	seen := map[string]bool{in: true}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := filepath.EvalSymlinks(filepath.Join(in, e.Name()))
		if err != nil {
			continue // a dangling link: the snapshot reader will name it
		}
		if d := filepath.Dir(target); !seen[d] {
			seen[d] = true
			dirs = append(dirs, protectedDir{d, "where the files of --input %s live"})
		}
	}
	return dirs, nil
}

// relation says how path a relates to directory b: "is", "is inside", "holds",
// or "" when neither contains the other.
func relation(a, b string) string {
	switch {
	case a == b:
		return "is"
	case within(a, b):
		return "is inside"
	case within(b, a):
		return "holds"
	}
	return ""
}

// within reports whether path a lies strictly inside directory b.
func within(a, b string) bool {
	rel, err := filepath.Rel(b, a)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// realPath is p made absolute with symlinks and ".." resolved, for a path
// that may not exist yet: its longest existing prefix is resolved and the
// rest appended.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for cur := abs; ; cur = filepath.Dir(cur) {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			for i := len(rest) - 1; i >= 0; i-- {
				real = filepath.Join(real, rest[i])
			}
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || cur == filepath.Dir(cur) {
			return "", err
		}
		rest = append(rest, filepath.Base(cur))
	}
}
