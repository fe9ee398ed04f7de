// Package verify checks installs against their receipts and manifests, and
// runs the golden-baseline release gate: fixed greedy generations compared
// byte for byte with stored baselines, a coverage guard over the installed
// models, and a fingerprint proving the gate left the models directory alone.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/nvmai/nvmai/pkg/limits"
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
	// Trusted says the reissued receipt records the bytes as found, checked
	// against nothing (InstallOptions.TrustCurrentBytes).
	Trusted bool `json:"trusted_current_bytes,omitempty"`
}

// OK reports whether the install is sound.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// requiredMetadata must be present in every install: the runtime cannot
// tokenize or configure generation without them.
var requiredMetadata = []string{"config.json", "tokenizer.json", "tokenizer_config.json"}

// InstallOptions configures an install check.
type InstallOptions struct {
	Threads int // files hashed in parallel
	// Reissue rewrites the receipt in canonical form, only when nothing was
	// wrong but its form: every file it lists matched its hash, and it
	// lists exactly the manifest's files.
	Reissue bool
	// TrustCurrentBytes, with Reissue, lets a missing or unreadable receipt
	// be replaced by one hashed from the files as they are now: nothing
	// vouches for them but the caller.
	TrustCurrentBytes bool
}

// Install is CheckInstall without cancellation or trust.
func Install(dir string, threads int, reissue bool) (*Report, error) {
	return CheckInstall(context.Background(), dir, InstallOptions{Threads: threads, Reissue: reissue})
}

// CheckInstall re-hashes every payload file of dir against its receipt,
// checks the manifest (ceilings, every tensor range inside its file, expert
// files of exactly experts × stride bytes), the presence of the tokenizer and
// configs, and that no stray file sits in the install. Every problem is
// reported. It stops with ctx's error when ctx is done.
func CheckInstall(ctx context.Context, dir string, opt InstallOptions) (*Report, error) {
	rep := &Report{Dir: dir, Problems: []Problem{}}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s is not an install directory: %v", dir, err)
	}
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		// Without a manifest the receipt still says what the install held:
		// check against it, so one bad edit does not hide every other defect.
		rep.add(packexperts.ManifestFile, "a valid nvmai manifest", err.Error())
		rs, cerr := checkReceipt(ctx, dir, nil, opt.Threads, rep)
		if cerr != nil {
			return nil, cerr
		}
		if rs.rc != nil {
			checkStrays(dir, receiptNames(rs.rc), rep)
		}
		if opt.Reissue {
			return rep, fmt.Errorf("not reissuing the receipt: %s has no valid manifest (%v)", dir, err)
		}
		return rep, nil
	}
	rep.ModelID, rep.Bits = m.ModelID, m.Bits
	checkPayloadSizes(dir, m, rep)
	checkMetadata(dir, m, rep)
	checkStrays(dir, manifestNames(m), rep)
	rs, err := checkReceipt(ctx, dir, m, opt.Threads, rep)
	if err != nil {
		return nil, err
	}
	if opt.Reissue {
		return rep, reissueReceipt(ctx, dir, m, rs, opt, rep)
	}
	if rep.OK() && rep.Files == 0 {
		rep.add(packexperts.ReceiptFile, "at least one file hashed", "none")
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

func checkMetadata(dir string, m *packexperts.Manifest, rep *Report) {
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.Name] = true
	}
	for _, n := range requiredMetadata {
		if !listed[n] {
			rep.add(n, "listed in the manifest (the runtime needs it)", "absent")
		}
	}
	checkTokenizer(dir, rep)
}

// checkTokenizer parses the tokenizer files as the runtime will, so a
// broken one fails here rather than at the first nvmai-run. Missing files
// are reported by the size and receipt checks.
func checkTokenizer(dir string, rep *Report) {
	for _, n := range []string{packexperts.TokenizerFile, packexperts.TokenizerConfigFile} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return
		}
	}
	err := packexperts.CheckTokenizerFiles(dir)
	var me *packexperts.MetadataError
	if errors.As(err, &me) {
		rep.add(me.File, "a file the runtime can load", me.Err.Error())
	} else if err != nil {
		rep.add(packexperts.TokenizerFile, "a tokenizer the runtime can load", err.Error())
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

// receiptState is what checkReceipt learnt about the receipt.
type receiptState struct {
	rc           *receipt.Receipt // nil when missing or unreadable
	unusable     string           // why rc is nil
	nonCanonical bool             // rc was parsed leniently
	defects      []Problem        // what is wrong with the receipt's content
}

// checkReceipt re-hashes every file the receipt lists and, when the manifest
// m is known, checks that the receipt covers exactly the manifest's files plus
// the manifest itself. A receipt that is sound but not in canonical form is
// still used: its hashes are what the install was sealed with.
func checkReceipt(ctx context.Context, dir string, m *packexperts.Manifest, threads int, rep *Report) (*receiptState, error) {
	rs := &receiptState{}
	raw, err := limits.ReadFile(filepath.Join(dir, packexperts.ReceiptFile), limits.Receipt)
	if err == nil {
		var canonical bool
		rs.rc, canonical, err = receipt.ParseLenient(raw)
		rs.nonCanonical = !canonical
	}
	if err != nil {
		rs.unusable = err.Error()
		if errors.Is(err, fs.ErrNotExist) {
			rs.unusable = "missing"
		}
		rep.add(packexperts.ReceiptFile, "a canonical receipt", rs.unusable)
		return rs, nil
	}
	if rs.nonCanonical {
		rep.add(packexperts.ReceiptFile, "a receipt in canonical form "+receipt.CanonicalForm, "a reformatted receipt (its hashes were still checked; --reissue rewrites it when they all match)")
	}
	before := len(rep.Problems)
	for _, f := range rs.rc.Files {
		rep.Files++
		rep.Bytes += f.Size
		if f.Name == packexperts.ManifestFile && f.SHA256 != rs.rc.ManifestSHA256 {
			rep.add(packexperts.ReceiptFile, "manifest_sha256 equal to the manifest.json entry", rs.rc.ManifestSHA256)
		}
	}
	if m != nil {
		checkReceiptCoversManifest(rs.rc, m, rep)
	}
	rs.defects = append(rs.defects, rep.Problems[before:]...)
	probs, err := receipt.CheckContext(ctx, dir, rs.rc, true, threads)
	if err != nil {
		return nil, err
	}
	rep.Problems = append(rep.Problems, probs...)
	return rs, nil
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

// reissueReceipt rewrites the receipt in canonical form. It never records
// bytes that were not checked: a receipt that is only reformatted is
// rewritten from its own entries once every one matched the files; a
// missing or unreadable receipt is replaced only when the caller trusts
// the current bytes, and then says so.
func reissueReceipt(ctx context.Context, dir string, m *packexperts.Manifest, rs *receiptState, opt InstallOptions, rep *Report) error {
	for _, p := range rep.Problems {
		if p.File != packexperts.ReceiptFile {
			return fmt.Errorf("not reissuing the receipt: %s has problems beyond the receipt (%s)", dir, p)
		}
	}
	var rc *receipt.Receipt
	switch {
	case rs.rc == nil && !opt.TrustCurrentBytes:
		return fmt.Errorf("not reissuing the receipt: %s has no usable receipt (%s), so nothing vouches for the files as they are; "+
			"reconvert the install, or, if you know the files are right (you copied them from an install that verified), "+
			"pass --trust-current-bytes to hash them into a new receipt", dir, rs.unusable)
	case rs.rc == nil:
		names := make([]string, len(m.Files))
		for i, f := range m.Files {
			names[i] = f.Name
		}
		var err error
		if rc, err = receipt.BuildContext(ctx, dir, packexperts.ManifestFile, names, "nvmai-verify --reissue --trust-current-bytes", opt.Threads); err != nil {
			return err
		}
		rep.Trusted = true
		for _, f := range rc.Files {
			rep.Files++
			rep.Bytes += f.Size
		}
	case len(rs.defects) > 0:
		return fmt.Errorf("not reissuing the receipt: its entries disagree with the manifest (%s); reconvert the install", rs.defects[0])
	default:
		rc = &receipt.Receipt{ReceiptVersion: receipt.Version, CanonicalForm: receipt.CanonicalForm,
			Tool: "nvmai-verify --reissue", ManifestSHA256: rs.rc.ManifestSHA256, Files: rs.rc.Files}
	}
	if len(rc.Files) == 0 {
		return fmt.Errorf("not reissuing the receipt: it would list no file")
	}
	if err := receipt.Write(filepath.Join(dir, packexperts.ReceiptFile), rc); err != nil {
		return err
	}
	rep.Problems, rep.Reissued = []Problem{}, true
	return nil
}
