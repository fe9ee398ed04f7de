// Package receipt owns verified-install.json: the sha256 and size of every
// file of an install, written only after the install was checked, in one
// versioned canonical encoding so that two tools producing a receipt for the
// same bytes produce the same receipt.
//
// Canonical form "nvmai-receipt-v1": the JSON object below encoded by
// encoding/json with two-space indentation, keys in the documented order,
// files sorted by name in byte order, names relative with '/' separators,
// sha256 as 64 lowercase hex digits, LF line ends and one trailing newline.
// No timestamps or absolute paths: a moved install still verifies.
package receipt

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/nvmai/nvmai/internal/filehash"
	"github.com/nvmai/nvmai/pkg/limits"
)

// Version and CanonicalForm identify the encoding; a reader refuses others.
const (
	Version       = 1
	CanonicalForm = "nvmai-receipt-v1"
)

// Receipt lists every file of an install with its size and sha256.
type Receipt struct {
	ReceiptVersion int    `json:"receipt_version"`
	CanonicalForm  string `json:"canonical_form"`
	Tool           string `json:"tool"`
	ManifestSHA256 string `json:"manifest_sha256"`
	Files          []File `json:"files"`
}

// File is one hashed file, named relative to the install directory.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Encode returns r in canonical form.
func Encode(r *Receipt) ([]byte, error) {
	c := *r
	c.Files = append([]File(nil), r.Files...)
	sort.Slice(c.Files, func(i, j int) bool { return c.Files[i].Name < c.Files[j].Name })
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&c); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Parse decodes a receipt and refuses one that is not in canonical form or
// whose fields are malformed.
func Parse(raw []byte) (*Receipt, error) {
	r, canonical, err := ParseLenient(raw)
	if err != nil {
		return nil, err
	}
	if !canonical {
		return nil, fmt.Errorf("%w; "+reissueHint, ErrNotCanonical, "DIR")
	}
	return r, nil
}

// ErrNotCanonical is a receipt whose fields are sound but whose bytes are
// not the canonical encoding (reformatted, whitespace edited).
var ErrNotCanonical = errors.New("receipt is not in canonical form " + CanonicalForm + " (edited by hand?)")

// reissueHint is true advice for a non-canonical receipt: --reissue
// compares every file with the hashes it still holds before rewriting it.
const reissueHint = "nvmai-verify --verify-install %s --reissue compares every file with its hashes and, when all match, rewrites it canonically"

// ParseLenient decodes a receipt whose bytes need not be canonical: its
// fields are checked as strictly as Parse checks them, and canonical says
// whether raw is the canonical encoding. A reformatted receipt still holds
// the hashes the install was sealed with, so a verifier can check the
// files against it before rewriting it.
func ParseLenient(raw []byte) (r *Receipt, canonical bool, err error) {
	if int64(len(raw)) > limits.Receipt {
		return nil, false, fmt.Errorf("receipt is %d bytes, over the %d-byte ceiling", len(raw), limits.Receipt)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	r = new(Receipt)
	if err := dec.Decode(r); err != nil {
		return nil, false, fmt.Errorf("receipt is not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, false, fmt.Errorf("receipt has data after its JSON object")
	}
	if err := r.validate(); err != nil {
		return nil, false, err
	}
	canon, err := Encode(r)
	if err != nil {
		return nil, false, err
	}
	return r, bytes.Equal(canon, raw), nil
}

func (r *Receipt) validate() error {
	if r.ReceiptVersion != Version || r.CanonicalForm != CanonicalForm {
		return fmt.Errorf("receipt version %d form %q is not %d %q: another nvmai version wrote it; check the install with that version, or reconvert it", r.ReceiptVersion, r.CanonicalForm, Version, CanonicalForm)
	}
	if !isHex64(r.ManifestSHA256) {
		return fmt.Errorf("receipt manifest_sha256 %q is not 64 lowercase hex digits", r.ManifestSHA256)
	}
	seen := map[string]bool{}
	for _, f := range r.Files {
		if f.Name == "" || seen[f.Name] || strings.Contains(f.Name, "..") || filepath.IsAbs(f.Name) || strings.Contains(f.Name, "\\") {
			return fmt.Errorf("receipt file name %q is empty, duplicated or not a plain relative path", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 || !isHex64(f.SHA256) {
			return fmt.Errorf("receipt entry %s has a bad size or sha256", f.Name)
		}
	}
	return nil
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Read loads and parses the receipt at path.
func Read(path string) (*Receipt, error) {
	raw, err := limits.ReadFile(path, limits.Receipt)
	if err != nil {
		return nil, err
	}
	r, canonical, err := ParseLenient(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !canonical {
		return nil, fmt.Errorf("%s: %w; "+reissueHint, path, ErrNotCanonical, filepath.Dir(path))
	}
	return r, nil
}

// Write stores r at path in canonical form, atomically (temp file, fsync, rename).
func Write(path string, r *Receipt) error {
	raw, err := Encode(r)
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, raw)
}

// WriteFileAtomic writes data to a temporary sibling, syncs it and renames it
// over path, so a reader sees the old file or the whole new one. The file
// gets mode 0644 less the umask, like every other file of an install, so a
// shared models directory or a service account can read it.
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := createTemp(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// createTemp is os.CreateTemp with mode 0644 (subject to the umask) where
// os.CreateTemp always uses 0600.
func createTemp(path string) (*os.File, error) {
	for range 100 {
		var rnd [6]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(rnd[:]))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("creating a temporary file next to %s: too many collisions", path)
}

// SHA256Hex is the lowercase hex sha256 of b.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Build hashes the named files of dir (threads at a time) and returns a
// receipt for them; manifestName is hashed too and recorded as the manifest.
func Build(dir, manifestName string, names []string, tool string, threads int) (*Receipt, error) {
	return BuildContext(context.Background(), dir, manifestName, names, tool, threads)
}

// BuildContext is Build, stopping with ctx's error when ctx is done.
func BuildContext(ctx context.Context, dir, manifestName string, names []string, tool string, threads int) (*Receipt, error) {
	all := append([]string{manifestName}, names...)
	files := make([]File, len(all))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(threads, 1))
	for i, name := range all {
		g.Go(func() error {
			size, sum, err := filehash.SHA256Context(ctx, filepath.Join(dir, filepath.FromSlash(name)))
			files[i] = File{Name: name, Size: size, SHA256: sum}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return &Receipt{ReceiptVersion: Version, CanonicalForm: CanonicalForm, Tool: tool, ManifestSHA256: files[0].SHA256, Files: files}, nil
}

// Problem is one disagreement between a receipt and the files on disk.
type Problem struct {
	File     string `json:"file"`
	Expected string `json:"expected"`
	Found    string `json:"found"`
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: expected %s, found %s", p.File, p.Expected, p.Found)
}

// Check compares dir against r. With full it re-hashes every file; otherwise
// it compares sizes only (what the runtime does at load). It reports every
// problem, not just the first.
func Check(dir string, r *Receipt, full bool, threads int) []Problem {
	probs, _ := CheckContext(context.Background(), dir, r, full, threads)
	return probs
}

// CheckContext is Check, stopping between blocks of a file with ctx's error
// when ctx is done (a 34 GiB install takes minutes to hash).
func CheckContext(ctx context.Context, dir string, r *Receipt, full bool, threads int) ([]Problem, error) {
	probs := make([][]Problem, len(r.Files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(threads, 1))
	for i, f := range r.Files {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			probs[i] = checkOne(gctx, dir, f, full)
			return nil
		})
	}
	g.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Problem
	for _, p := range probs {
		out = append(out, p...)
	}
	return out, nil
}

func checkOne(ctx context.Context, dir string, f File, full bool) []Problem {
	p := filepath.Join(dir, filepath.FromSlash(f.Name))
	st, err := os.Stat(p)
	if err != nil {
		return []Problem{{f.Name, fmt.Sprintf("%d bytes", f.Size), "missing (" + err.Error() + ")"}}
	}
	if st.Size() != f.Size {
		return []Problem{{f.Name, fmt.Sprintf("%d bytes", f.Size), fmt.Sprintf("%d bytes", st.Size())}}
	}
	if !full {
		return nil
	}
	_, sum, err := filehash.SHA256Context(ctx, p)
	if err != nil {
		return []Problem{{f.Name, "sha256 " + f.SHA256, "unreadable (" + err.Error() + ")"}}
	}
	if sum != f.SHA256 {
		return []Problem{{f.Name, "sha256 " + f.SHA256, "sha256 " + sum}}
	}
	return nil
}
