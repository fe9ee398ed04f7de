// Package verify checks installs against their receipts and manifests, and
// runs the golden-baseline release gate: fixed greedy generations compared
// byte for byte with stored baselines, a coverage guard over the installed
// models, and a fingerprint proving the gate left the models directory alone.
package verify

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
)

// Problem is one defect of an install: the file, what was expected, what was found.
type Problem = receipt.Problem

// Report is the outcome of an install check.
type Report struct {
	Dir      string    `json:"dir"`
	ModelID  string    `json:"model_id,omitempty"`
	Bits     int       `json:"bits,omitempty"`
	Files    int       `json:"files_checked"`
	Bytes    int64     `json:"bytes_hashed"`
	Problems []Problem `json:"problems"`
	Reissued bool      `json:"reissued,omitempty"`
}

// OK reports whether the install is sound.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// requiredMetadata must be present in every install: the runtime cannot
// tokenize or configure generation without them.
var requiredMetadata = []string{"config.json", "tokenizer.json", "tokenizer_config.json"}

// Install re-hashes every payload file of dir against its receipt, checks the
// manifest (ceilings, every tensor range inside its file, expert files of
// exactly experts × stride bytes), the presence of the tokenizer and configs,
// and that no stray file sits in the install. Every problem is reported.
// With reissue, a fresh receipt is written, but only if nothing was wrong
// apart from the receipt itself.
func Install(dir string, threads int, reissue bool) (*Report, error) {
	rep := &Report{Dir: dir, Problems: []Problem{}}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not an install directory: %v", dir, err)
	}
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		// Without a manifest the receipt still says what the install held:
		// check against it, so one bad edit does not hide every other defect.
		rep.add(packexperts.ManifestFile, "a valid nvmai manifest", err.Error())
		if rc := checkReceipt(dir, nil, threads, rep); rc != nil {
			checkStrays(dir, receiptNames(rc), rep)
		}
		if reissue {
			return rep, fmt.Errorf("not reissuing the receipt: %s has no valid manifest (%v)", dir, err)
		}
		return rep, nil
	}
	rep.ModelID, rep.Bits = m.ModelID, m.Bits
	checkPayloadSizes(dir, m, rep)
	checkMetadata(m, rep)
	checkStrays(dir, manifestNames(m), rep)
	checkReceipt(dir, m, threads, rep)
	if reissue {
		return rep, reissueReceipt(dir, m, threads, rep)
	}
	return rep, nil
}

// manifestNames lists every file an install with manifest m may hold.
func manifestNames(m *packexperts.Manifest) []string {
	names := []string{packexperts.ManifestFile, packexperts.ReceiptFile}
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	return names
}

// receiptNames lists every file the receipt accounts for, itself included.
func receiptNames(rc *receipt.Receipt) []string {
	names := []string{packexperts.ReceiptFile}
	for _, f := range rc.Files {
		names = append(names, f.Name)
	}
	return names
}

func (r *Report) add(file, expected, found string) {
	r.Problems = append(r.Problems, Problem{File: file, Expected: expected, Found: found})
}

func checkPayloadSizes(dir string, m *packexperts.Manifest, rep *Report) {
	for _, f := range m.Files {
		fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f.Name)))
		switch {
		case err != nil:
			rep.add(f.Name, fmt.Sprintf("%d bytes", f.Size), "missing")
		case !fi.Mode().IsRegular():
			rep.add(f.Name, "a regular file", fi.Mode().String())
		case fi.Size() != f.Size:
			rep.add(f.Name, fmt.Sprintf("%d bytes (manifest)", f.Size), fmt.Sprintf("%d bytes", fi.Size()))
		}
	}
}

func checkMetadata(m *packexperts.Manifest, rep *Report) {
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Name] = true
	}
	for _, n := range requiredMetadata {
		if !listed[n] {
			rep.add(n, "listed in the manifest (the runtime needs it)", "absent")
		}
	}
}

// checkStrays reports files in the install that neither the manifest nor the
// receipt accounts for: something wrote into the install after it was sealed.
func checkStrays(dir string, allowed []string, rep *Report) {
	known := map[string]bool{}
	for _, n := range allowed {
		known[n] = true
	}
	var strays []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if !known[filepath.ToSlash(rel)] {
			strays = append(strays, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(strays)
	for _, s := range strays {
		rep.add(s, "no file (not in the manifest)", "a stray file")
	}
}

// checkReceipt re-hashes every file the receipt lists and, when the manifest
// m is known, checks that the receipt covers exactly the manifest's files plus
// the manifest itself. It returns the receipt, or nil when it is unreadable.
func checkReceipt(dir string, m *packexperts.Manifest, threads int, rep *Report) *receipt.Receipt {
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		found := err.Error()
		if errors.Is(err, fs.ErrNotExist) {
			found = "missing"
		}
		rep.add(packexperts.ReceiptFile, "a canonical receipt", found)
		return nil
	}
	for _, f := range rc.Files {
		rep.Files++
		rep.Bytes += f.Size
		if f.Name == packexperts.ManifestFile && f.SHA256 != rc.ManifestSHA256 {
			rep.add(packexperts.ReceiptFile, "manifest_sha256 equal to the manifest.json entry", rc.ManifestSHA256)
		}
	}
	if m != nil {
		checkReceiptCoversManifest(rc, m, rep)
	}
	rep.Problems = append(rep.Problems, receipt.Check(dir, rc, true, threads)...)
	return rc
}

func checkReceiptCoversManifest(rc *receipt.Receipt, m *packexperts.Manifest, rep *Report) {
	want := map[string]bool{packexperts.ManifestFile: true}
	for _, f := range m.Files {
		want[f.Name] = true
	}
	for _, f := range rc.Files {
		if !want[f.Name] {
			rep.add(packexperts.ReceiptFile, "only files of the manifest", "an entry for "+f.Name)
		}
		delete(want, f.Name)
	}
	missing := make([]string, 0, len(want))
	for name := range want {
		missing = append(missing, name)
	}
	sort.Strings(missing)
	for _, name := range missing {
		rep.add(packexperts.ReceiptFile, "an entry for "+name, "none")
	}
}

// reissueReceipt rewrites the receipt from the files on disk, refusing when
// anything but the receipt itself was found wrong.
func reissueReceipt(dir string, m *packexperts.Manifest, threads int, rep *Report) error {
	for _, p := range rep.Problems {
		if p.File != packexperts.ReceiptFile {
			return fmt.Errorf("not reissuing the receipt: %s has problems beyond the receipt (%s)", dir, p)
		}
	}
	names := make([]string, len(m.Files))
	for i, f := range m.Files {
		names[i] = f.Name
	}
	rc, err := receipt.Build(dir, packexperts.ManifestFile, names, "nvmai-verify --reissue", threads)
	if err != nil {
		return err
	}
	if err := receipt.Write(filepath.Join(dir, packexperts.ReceiptFile), rc); err != nil {
		return err
	}
	rep.Problems, rep.Reissued = []Problem{}, true
	return nil
}
