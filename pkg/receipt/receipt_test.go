package receipt

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
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
