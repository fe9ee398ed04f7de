package hf

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
)

// readBounded reads a whole, non-empty file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	b, err := limits.ReadFile(path, limit)
	if err == nil && len(b) == 0 {
		err = fmt.Errorf("%s: file is empty; the download is probably incomplete", path)
	}
	return b, err
}

// checkSize refuses anything but a non-empty regular file of at most limit bytes.
func checkSize(path string, st fs.FileInfo, limit int64) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file (mode %v)", path, st.Mode())
	}
	if st.Size() > limit {
		return fmt.Errorf("%s: %d bytes, over the %d-byte ceiling for this file; it is not a file nvmai can read", path, st.Size(), limit)
	}
	if st.Size() == 0 {
		return fmt.Errorf("%s: file is empty; the download is probably incomplete", path)
	}
	return nil
}

// statBounded checks a file the snapshot only needs to exist (the tokenizer
// package parses it) and returns its size.
func statBounded(path string, limit int64) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), checkSize(path, st, limit)
}

// checkRelativeName refuses a file name from the index that could point
// outside the snapshot or means different things on different systems.
// Subdirectories are allowed; symlinks inside the snapshot are followed later,
// as the Hugging Face cache layout requires.
func checkRelativeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty file name")
	case strings.ContainsAny(name, "\\\x00"):
		return fmt.Errorf("file name %q contains a backslash or NUL", name)
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("file name %q is absolute", name)
	case !fs.ValidPath(name) || name == ".":
		return fmt.Errorf("file name %q is not a plain relative path inside the snapshot (no '.', '..' or empty components)", name)
	}
	return nil
}
