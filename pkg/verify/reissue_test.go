package verify

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
)

// review H3, the exact repro: a damaged resident.bin plus a receipt made
// non-canonical by one space. --reissue blessed the damage ("ok, 0 files").
// A non-canonical receipt still holds the hashes: every file is compared
// with it, and the damage refuses the reissue.
func TestReissueNeverBlessesDamageBehindAReformattedReceipt(t *testing.T) {
	dir := installCopy(t, 4)
	rcPath := filepath.Join(dir, packexperts.ReceiptFile)
	testfix.FlipByte(t, filepath.Join(dir, packexperts.ResidentFile), 5000, 0x01)
	editReceipt(t, rcPath, `"receipt_version": 1`, `"receipt_version": 1 `)
	before, _ := os.ReadFile(rcPath)
	rep, err := Install(dir, 2, true)
	if err == nil || rep == nil || rep.Reissued || rep.OK() {
		t.Fatalf("--reissue over a damaged resident.bin: err %v, report %+v", err, rep)
	}
	if !hasProblem(rep, packexperts.ResidentFile, "sha256") {
		t.Errorf("the damage to resident.bin is not reported:\n%s", problems(rep))
	}
	if after, _ := os.ReadFile(rcPath); !bytes.Equal(before, after) {
		t.Error("the receipt was rewritten over a damaged resident.bin")
	}
	rep, err = Install(dir, 2, false)
	if err != nil || rep.OK() || !hasProblem(rep, packexperts.ResidentFile, "sha256") {
		t.Fatalf("the next check does not find the damage: err %v\n%s", err, problems(rep))
	}
}

// The same repro with the receipt deleted: nothing vouches for the bytes,
// so --reissue alone refuses and says how to trust them on purpose.
func TestReissueWithoutReceiptNeedsTrust(t *testing.T) {
	dir := installCopy(t, 4)
	rcPath := filepath.Join(dir, packexperts.ReceiptFile)
	testfix.FlipByte(t, filepath.Join(dir, packexperts.ResidentFile), 5000, 0x01)
	remove(t, rcPath)
	rep, err := Install(dir, 2, true)
	if err == nil || !strings.Contains(err.Error(), "--trust-current-bytes") {
		t.Fatalf("--reissue without a receipt: err %v, want a refusal naming --trust-current-bytes", err)
	}
	if rep != nil && (rep.Reissued || rep.OK()) {
		t.Errorf("report %+v says sound or reissued", rep)
	}
	if _, err := os.Stat(rcPath); !os.IsNotExist(err) {
		t.Errorf("a receipt was written: %v", err)
	}
}

func editReceipt(t *testing.T, path, old, new string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(old)) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	writeFile(t, path, strings.Replace(string(raw), old, new, 1))
}

// What --reissue may and may not rewrite, beyond the two repros above.
func TestReissueRules(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		trust   bool
		reissue bool   // the receipt is rewritten
		trusted bool   // ... from bytes nothing vouched for
		errWant string // substring of the refusal
	}{
		{"a reformatted receipt over sound files", func(t *testing.T, dir string) {
			editReceipt(t, filepath.Join(dir, packexperts.ReceiptFile), "\n  ", "\n\t")
		}, false, true, false, ""},
		{"a receipt with an entry removed, over a damaged file", func(t *testing.T, dir string) {
			dropReceiptEntry(t, dir, packexperts.ResidentFile)
			testfix.FlipByte(t, filepath.Join(dir, packexperts.ResidentFile), 5000, 0x01)
		}, true, false, false, "disagree with the manifest"},
		{"a receipt whose hash was edited", func(t *testing.T, dir string) {
			rc := readReceipt(t, dir)
			rc.Files[0].SHA256 = strings.Repeat("0", 64)
			writeReceipt(t, dir, rc)
		}, true, false, false, "beyond the receipt"},
		{"an unreadable receipt, trusted", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, packexperts.ReceiptFile), "{")
		}, true, true, true, ""},
		{"an unreadable receipt, not trusted", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, packexperts.ReceiptFile), "{")
		}, false, false, false, "--trust-current-bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := installCopy(t, 4)
			orig := readReceipt(t, dir)
			tc.damage(t, dir)
			rep, err := CheckInstall(context.Background(), dir, InstallOptions{Threads: 2, Reissue: true, TrustCurrentBytes: tc.trust})
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("error %v, want one containing %q", err, tc.errWant)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Reissued != tc.reissue || rep.Trusted != tc.trusted || rep.Files == 0 {
				t.Fatalf("report %+v, want reissued %v trusted %v", rep, tc.reissue, tc.trusted)
			}
			got := readReceipt(t, dir)
			if got.ManifestSHA256 != orig.ManifestSHA256 || !slices.Equal(got.Files, orig.Files) {
				t.Error("the reissued receipt lists other files or hashes than the original")
			}
			if rep, err := Install(dir, 2, false); err != nil || !rep.OK() {
				t.Errorf("after reissue: %v\n%s", err, problems(rep))
			}
		})
	}
}

// A missing receipt without --reissue is a problem, never "ok, 0 files".
func TestMissingReceiptIsNotOK(t *testing.T) {
	dir := installCopy(t, 4)
	remove(t, filepath.Join(dir, packexperts.ReceiptFile))
	rep, err := Install(dir, 2, false)
	if err != nil || rep.OK() || !hasProblem(rep, packexperts.ReceiptFile, "missing") {
		t.Fatalf("err %v, report %+v", err, rep)
	}
}

// review M8: hashing stops when the context is cancelled.
func TestCheckInstallStopsOnCancel(t *testing.T) {
	dir := installCopy(t, 16)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	rep, err := CheckInstall(ctx, dir, InstallOptions{Threads: 1})
	if !errors.Is(err, context.Canceled) || rep != nil {
		t.Fatalf("cancelled check: report %v, err %v; want context.Canceled", rep, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a cancelled check took %v", d)
	}
}

// review M1: a reissued receipt is readable by others, like the rest.
func TestReissuedReceiptMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := installCopy(t, 4)
	editReceipt(t, filepath.Join(dir, packexperts.ReceiptFile), "\n  ", "\n   ")
	if _, err := Install(dir, 2, true); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("reissued receipt mode %v (%v), want 0644 under umask 022", fi.Mode().Perm(), err)
	}
}

func readReceipt(t *testing.T, dir string) *receipt.Receipt {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := receipt.ParseLenient(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func writeReceipt(t *testing.T, dir string, rc *receipt.Receipt) {
	t.Helper()
	if err := receipt.Write(filepath.Join(dir, packexperts.ReceiptFile), rc); err != nil {
		t.Fatal(err)
	}
}

func dropReceiptEntry(t *testing.T, dir, name string) {
	t.Helper()
	rc := readReceipt(t, dir)
	kept := rc.Files[:0]
	for _, f := range rc.Files {
		if f.Name != name {
			kept = append(kept, f)
		}
	}
	rc.Files = kept
	writeReceipt(t, dir, rc)
}
