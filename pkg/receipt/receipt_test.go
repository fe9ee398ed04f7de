package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func sample(t testing.TB) (string, *Receipt) {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("{}\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "experts"), 0o755)
	os.WriteFile(filepath.Join(dir, "experts", "layer-000.bin"), []byte("expert bytes"), 0o644)
	os.WriteFile(filepath.Join(dir, "resident.bin"), []byte("resident"), 0o644)
	r, err := Build(dir, "manifest.json", []string{"resident.bin", "experts/layer-000.bin"}, "test", 2)
	if err != nil {
		t.Fatal(err)
	}
	return dir, r
}

// The canonical form is stable: sorted files, fixed key order, no
// timestamps, so the same bytes always give the same receipt.
func TestCanonicalForm(t *testing.T) {
	_, r := sample(t)
	raw, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "receipt_version": 1,
  "canonical_form": "nvmai-receipt-v1",
  "tool": "test",
  "manifest_sha256": "ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356",
  "files": [
    {
      "name": "experts/layer-000.bin",`
	if !strings.HasPrefix(string(raw), want) {
		t.Fatalf("canonical encoding changed:\n%s", raw)
	}
	back, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Encode(back)
	if !bytes.Equal(raw, again) {
		t.Fatal("parse and encode are not inverse")
	}
}

func TestParseRefusesNonCanonicalOrMalformed(t *testing.T) {
	_, r := sample(t)
	raw, _ := Encode(r)
	for name, bad := range map[string]string{
		"reindented":    strings.ReplaceAll(string(raw), "  ", "\t"),
		"no newline":    strings.TrimSuffix(string(raw), "\n"),
		"other version": strings.Replace(string(raw), `"receipt_version": 1`, `"receipt_version": 2`, 1),
		"absolute name": strings.Replace(string(raw), `"resident.bin"`, `"/resident.bin"`, 1),
		"escaping name": strings.Replace(string(raw), `"resident.bin"`, `"../resident.bin"`, 1),
		"short sha":     strings.Replace(string(raw), r.ManifestSHA256, "abc", 1),
		"unknown field": strings.Replace(string(raw), `"tool"`, `"extra": 1, "tool"`, 1),
		"not json":      "receipt",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckFindsEveryProblem(t *testing.T) {
	dir, r := sample(t)
	if probs := Check(dir, r, true, 2); len(probs) != 0 {
		t.Fatalf("clean install: %v", probs)
	}
	os.WriteFile(filepath.Join(dir, "resident.bin"), []byte("Resident"), 0o644) // same size, one byte flipped
	os.Remove(filepath.Join(dir, "experts", "layer-000.bin"))
	if probs := Check(dir, r, false, 2); len(probs) != 1 {
		t.Fatalf("size-only check: %v", probs)
	}
	probs := Check(dir, r, true, 2)
	if len(probs) != 2 || !strings.Contains(probs[0].String()+probs[1].String(), "sha256") {
		t.Fatalf("full check: %v", probs)
	}
}

func TestWriteIsAtomicAndReadable(t *testing.T) {
	dir, r := sample(t)
	p := filepath.Join(dir, "verified-install.json")
	if err := Write(p, r); err != nil {
		t.Fatal(err)
	}
	back, err := Read(p)
	if err != nil || back.ManifestSHA256 != r.ManifestSHA256 {
		t.Fatalf("read back: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}

// review M1: a receipt is 0644 less the umask, like every other file of an
// install; os.CreateTemp's 0600 locked other users out of shared installs.
func TestWriteMode(t *testing.T) {
	for _, umask := range []int{0o022, 0o002, 0o077} {
		t.Run(fmt.Sprintf("umask %03o", umask), func(t *testing.T) {
			old := syscall.Umask(umask)
			defer syscall.Umask(old)
			dir, r := sample(t)
			p := filepath.Join(dir, "verified-install.json")
			for range 2 { // a fresh write, then a rewrite over it
				if err := Write(p, r); err != nil {
					t.Fatal(err)
				}
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if want := os.FileMode(0o644 &^ umask); fi.Mode().Perm() != want {
					t.Errorf("mode %v, want %v", fi.Mode().Perm(), want)
				}
			}
		})
	}
}

// A receipt reformatted by hand keeps its hashes: ParseLenient reads it and
// says it is not canonical; Parse refuses it with a hint that is true.
func TestParseLenient(t *testing.T) {
	_, r := sample(t)
	canon, _ := Encode(r)
	cases := []struct {
		name      string
		raw       string
		canonical bool
		err       string
	}{
		{"canonical", string(canon), true, ""},
		{"a space added", strings.Replace(string(canon), `"receipt_version": 1`, `"receipt_version": 1 `, 1), false, ""},
		{"compacted", compact(t, canon), false, ""},
		{"another version", strings.Replace(string(canon), `"receipt_version": 1`, `"receipt_version": 2`, 1), false, "another nvmai version"},
		{"trailing data", string(canon) + "{}", false, "after its JSON object"},
		{"not JSON", "{", false, "not valid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, canonical, err := ParseLenient([]byte(tc.raw))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || canonical != tc.canonical || got.ManifestSHA256 != r.ManifestSHA256 || len(got.Files) != len(r.Files) {
				t.Fatalf("canonical %v err %v, want canonical %v and the same entries", canonical, err, tc.canonical)
			}
			if _, err := Parse([]byte(tc.raw)); (err == nil) != tc.canonical || err != nil && !strings.Contains(err.Error(), "--reissue compares every file") {
				t.Errorf("Parse: %v", err)
			}
		})
	}
}

func compact(t testing.TB, raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func FuzzParse(f *testing.F) {
	_, r := sample(f)
	raw, _ := Encode(r)
	f.Add(raw)
	f.Add([]byte(`{"receipt_version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Encode(r)
		if err != nil || !bytes.Equal(again, data) {
			t.Fatal("accepted a receipt that is not in canonical form")
		}
	})
}

// Whatever ParseLenient accepts re-encodes to a canonical receipt that Parse
// accepts with the same entries: reissuing from a lenient parse loses or
// invents nothing.
func FuzzParseLenient(f *testing.F) {
	_, r := sample(f)
	raw, _ := Encode(r)
	f.Add(raw)
	f.Add([]byte(compact(f, raw)))
	f.Add([]byte(`{"receipt_version":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, canonical, err := ParseLenient(data)
		if err != nil {
			return
		}
		canon, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if canonical != bytes.Equal(canon, data) {
			t.Fatalf("canonical = %v for bytes that do not say so", canonical)
		}
		back, err := Parse(canon)
		if err != nil || back.ManifestSHA256 != r.ManifestSHA256 || len(back.Files) != len(r.Files) {
			t.Fatalf("the canonical re-encoding does not parse back: %v", err)
		}
	})
}

// The hint nvmai-run and nvmai-verify pass on names the install, and is
// true: --reissue checks a non-canonical receipt's hashes (review H3).
func TestReadNonCanonicalNamesTheInstall(t *testing.T) {
	dir, r := sample(t)
	canon, _ := Encode(r)
	p := filepath.Join(dir, "verified-install.json")
	if err := os.WriteFile(p, bytes.Replace(canon, []byte("\n  "), []byte("\n    "), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Read(p)
	if !errors.Is(err, ErrNotCanonical) || !strings.Contains(err.Error(), "nvmai-verify --verify-install "+dir+" --reissue compares every file") {
		t.Fatalf("Read: %v", err)
	}
}
