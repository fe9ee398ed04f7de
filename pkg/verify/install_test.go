package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/filehash"
	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
)

func TestInstallSound(t *testing.T) {
	for _, bits := range []int{4, 8, 16} {
		dir := filepath.Join(embeddedModels(t), fmt.Sprintf("tiny-moe-%dbit", bits))
		rep, err := Install(dir, 2, false)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || rep.Bits != bits || rep.Files == 0 || rep.Bytes == 0 {
			t.Errorf("%d-bit: report %+v, want a sound %d-bit install", bits, rep, bits)
		}
	}
}

// manifestEdit rewrites the install's manifest through a generic JSON tree.
func manifestEdit(edit func(m map[string]any)) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		p := filepath.Join(dir, packexperts.ManifestFile)
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		out, err := json.MarshalIndent(m, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func firstTensor(m map[string]any) map[string]any {
	return m["tensors"].([]any)[0].(map[string]any)
}

func fileEntry(m map[string]any, name string) map[string]any {
	for _, f := range m["files"].([]any) {
		if e := f.(map[string]any); e["name"] == name {
			return e
		}
	}
	panic("no manifest files entry " + name)
}

// TestInstallTamper damages a copy of a sound install in one way each and
// checks that the verifier fails naming the damaged file.
func TestInstallTamper(t *testing.T) {
	const expertFile = "experts/layer-001.bin"
	tests := []struct {
		name     string
		tamper   func(t *testing.T, dir string)
		wantFile string // a problem must name this file
		wantText string // and mention this in expected or found
	}{
		{"expert byte flipped", func(t *testing.T, dir string) { testfix.FlipByte(t, filepath.Join(dir, expertFile), 5000, 0x01) }, expertFile, "sha256"},
		{"resident truncated", func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, packexperts.ResidentFile), -100) }, packexperts.ResidentFile, "bytes"},
		{"expert file truncated", func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, expertFile), -4096) }, expertFile, "bytes"},
		{"stray file added", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "experts", "notes.txt"), "hello") }, "experts/notes.txt", "stray"},
		{"tokenizer removed", func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "tokenizer.json")) }, "tokenizer.json", "missing"},
		{"config removed", func(t *testing.T, dir string) { remove(t, filepath.Join(dir, "config.json")) }, "config.json", "missing"},
		// review M5: a broken tokenizer verified "ok" and failed only at nvmai-run.
		{"tokenizer.json truncated", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "tokenizer.json"), "{\n") }, "tokenizer.json", "invalid JSON"},
		{"tokenizer_config.json chat_template not a string", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{"chat_template": 5}`)
		}, "tokenizer_config.json", "chat_template"},
		{"chat_template.jinja not UTF-8", func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "chat_template.jinja"), "\xff") }, "chat_template.jinja", "UTF-8"},
		{"manifest tensor offset changed", manifestEdit(func(m map[string]any) {
			tt := firstTensor(m)
			tt["offset"] = tt["offset"].(float64) + 64
		}), packexperts.ManifestFile, ""},
		{"manifest tensor length changed", manifestEdit(func(m map[string]any) {
			tt := firstTensor(m)
			tt["length"] = tt["length"].(float64) * 2
		}), packexperts.ManifestFile, ""},
		{"manifest file size changed", manifestEdit(func(m map[string]any) {
			e := fileEntry(m, packexperts.ResidentFile)
			e["size"] = e["size"].(float64) + 64
		}), packexperts.ManifestFile, ""},
		{"manifest model id changed, same length (still valid)", func(t *testing.T, dir string) {
			p := filepath.Join(dir, packexperts.ManifestFile)
			raw, _ := os.ReadFile(p)
			edited := bytes.Replace(raw, []byte(`"model_id": "tiny-moe-fused"`), []byte(`"model_id": "tiny-moe-fuseX"`), 1)
			if bytes.Equal(raw, edited) {
				t.Fatal("model_id not found in the manifest")
			}
			writeFile(t, p, string(edited))
		}, packexperts.ManifestFile, "sha256"},
		{"manifest expert stride changed", manifestEdit(func(m map[string]any) {
			x := m["experts"].(map[string]any)
			x["stride"] = x["stride"].(float64) * 2
		}), packexperts.ManifestFile, "experts"},
		{"receipt deleted", func(t *testing.T, dir string) { remove(t, filepath.Join(dir, packexperts.ReceiptFile)) }, packexperts.ReceiptFile, "missing"},
		{"receipt not canonical", func(t *testing.T, dir string) {
			p := filepath.Join(dir, packexperts.ReceiptFile)
			raw, _ := os.ReadFile(p)
			writeFile(t, p, strings.Replace(string(raw), "\n", "\r\n", 1))
		}, packexperts.ReceiptFile, "canonical"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := installCopy(t, 4)
			tc.tamper(t, dir)
			rep, err := Install(dir, 2, false)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatal("damaged install verified as sound")
			}
			if !hasProblem(rep, tc.wantFile, tc.wantText) {
				t.Errorf("no problem names %s with %q; problems:\n%s", tc.wantFile, tc.wantText, problems(rep))
			}
		})
	}
}

// TestInstallFlippedByteNamesBothHashes checks the expected/found pair of a
// hash mismatch: the receipt's sha256 and the one of the bytes on disk.
func TestInstallFlippedByteNamesBothHashes(t *testing.T) {
	dir := installCopy(t, 8)
	const name = "experts/layer-000.bin"
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, f := range rc.Files {
		if f.Name == name {
			want = f.SHA256
		}
	}
	testfix.FlipByte(t, filepath.Join(dir, name), 1, 0x01)
	_, got, err := filehash.SHA256(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Install(dir, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem := Problem{File: name, Expected: "sha256 " + want, Found: "sha256 " + got}
	if len(rep.Problems) != 1 || rep.Problems[0] != wantProblem {
		t.Errorf("problems %v, want exactly %v", rep.Problems, wantProblem)
	}
}

func TestInstallMovedStillVerifies(t *testing.T) {
	dir := installCopy(t, 4)
	moved := filepath.Join(t.TempDir(), "elsewhere", "renamed-install")
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	rep, err := Install(moved, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("moved install fails:\n%s", problems(rep))
	}
}

func TestInstallReissue(t *testing.T) {
	t.Run("refused when a payload is damaged", func(t *testing.T) {
		dir := installCopy(t, 4)
		rcPath := filepath.Join(dir, packexperts.ReceiptFile)
		before, _ := os.ReadFile(rcPath)
		testfix.FlipByte(t, filepath.Join(dir, packexperts.ResidentFile), 100, 0x01)
		rep, err := Install(dir, 2, true)
		if err == nil || !strings.Contains(err.Error(), "not reissuing") {
			t.Fatalf("reissue over a damaged payload: err %v", err)
		}
		if rep.Reissued {
			t.Error("report says reissued")
		}
		if after, _ := os.ReadFile(rcPath); !bytes.Equal(before, after) {
			t.Error("the receipt was rewritten although a payload is damaged")
		}
	})
	t.Run("refused when the receipt is gone and a payload is damaged", func(t *testing.T) {
		dir := installCopy(t, 4)
		remove(t, filepath.Join(dir, packexperts.ReceiptFile))
		truncate(t, filepath.Join(dir, "experts/layer-000.bin"), -1)
		if _, err := Install(dir, 2, true); err == nil {
			t.Fatal("reissued over a truncated expert file")
		}
		if _, err := os.Stat(filepath.Join(dir, packexperts.ReceiptFile)); !os.IsNotExist(err) {
			t.Errorf("a receipt was written: %v", err)
		}
	})
	t.Run("refused when a stray file was added", func(t *testing.T) {
		dir := installCopy(t, 4)
		writeFile(t, filepath.Join(dir, "extra.bin"), "x")
		if _, err := Install(dir, 2, true); err == nil {
			t.Fatal("reissued over a stray file")
		}
	})
	t.Run("allowed when only the receipt was deleted and the bytes are trusted", func(t *testing.T) {
		dir := installCopy(t, 4)
		rcPath := filepath.Join(dir, packexperts.ReceiptFile)
		orig, err := receipt.Read(rcPath)
		if err != nil {
			t.Fatal(err)
		}
		remove(t, rcPath)
		rep, err := CheckInstall(context.Background(), dir, InstallOptions{Threads: 2, Reissue: true, TrustCurrentBytes: true})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Reissued || !rep.Trusted || !rep.OK() || rep.Files != len(orig.Files) {
			t.Fatalf("report %+v, want reissued from %d trusted files and sound", rep, len(orig.Files))
		}
		got, err := receipt.Read(rcPath)
		if err != nil {
			t.Fatal(err)
		}
		if got.ManifestSHA256 != orig.ManifestSHA256 || !slices.Equal(got.Files, orig.Files) {
			t.Errorf("reissued receipt lists other files or hashes than the original")
		}
		if rep, err := Install(dir, 2, false); err != nil || !rep.OK() {
			t.Errorf("install does not verify after reissue: %v %v", err, rep)
		}
	})
}

// TestInstallBrokenManifestStillChecksPayloads: an unparsable manifest must
// not hide damage the receipt can still find.
func TestInstallBrokenManifestStillChecksPayloads(t *testing.T) {
	dir := installCopy(t, 4)
	writeFile(t, filepath.Join(dir, packexperts.ManifestFile), "{not json")
	testfix.FlipByte(t, filepath.Join(dir, "experts/layer-002.bin"), 7, 0x01)
	writeFile(t, filepath.Join(dir, "stray.txt"), "x")
	rep, err := Install(dir, 2, true)
	if err == nil {
		t.Error("reissued without a valid manifest")
	}
	for _, want := range []string{packexperts.ManifestFile, "experts/layer-002.bin", "stray.txt"} {
		if !hasProblem(rep, want, "") {
			t.Errorf("no problem names %s:\n%s", want, problems(rep))
		}
	}
}

func TestInstallNotADirectory(t *testing.T) {
	if _, err := Install(filepath.Join(t.TempDir(), "absent"), 1, false); err == nil {
		t.Error("no error for a missing directory")
	}
}
func hasProblem(rep *Report, file, text string) bool {
	for _, p := range rep.Problems {
		if p.File == file && strings.Contains(p.Expected+" "+p.Found, text) {
			return true
		}
	}
	return false
}

func problems(rep *Report) string {
	var b strings.Builder
	for _, p := range rep.Problems {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

// truncate shortens path by -delta bytes (delta < 0).
func truncate(t *testing.T, path string, delta int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()+delta); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
