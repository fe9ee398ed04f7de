package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// copyInstall copies the tiny install to a new directory, keeping every
// file's modification time (as cp -a does).
func copyInstall(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "install")
	testfix.CopyTree(t, src, dst)
	keepTimes(t, src, dst)
	return dst
}

func keepTimes(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		return os.Chtimes(filepath.Join(dst, rel), fi.ModTime(), fi.ModTime())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flipMiddle flips one byte in the middle of p; keepTime puts its
// modification time back, as a careful tamperer or silent disk corruption
// would leave it.
func flipMiddle(t *testing.T, p string, keepTime bool) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x5a
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if keepTime {
		if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
}

func loadDir(t *testing.T, dir string) *runtime.Engine {
	t.Helper()
	e, err := runtime.Load(dir, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// D12: a damaged install (one byte of resident.bin flipped, its receipt
// unchanged) never resumes the snapshots the intact install wrote: its
// changed file changes the disk key, so it misses; and when even the
// file's time was put back, VerifyInstall (which `serve --model` runs
// before using the disk cache) refuses it, naming the file and
// nvmai-verify. The intact install and an exact copy pass and share the
// key, so a restart or a `cp -a` keeps its hits.
func TestDiskCacheNeverResumesOnADamagedInstall(t *testing.T) {
	pristine := fixinstall.Install(t, testfix.Embedded(t), 8)
	e := loadDir(t, pristine)
	tok := e.Tokenizer
	system := "<|im_start|>system\nYou are a coding agent. Tools: read_file(path), run(cmd), search(query).<|im_end|>\n"
	first := tok.Encode(system + "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
	second := tok.Encode(system + "<|im_start|>user\nList two files.<|im_end|>\n<|im_start|>assistant\n")

	cache := t.TempDir()
	w, d := diskEngine(t, e, cache, RuntimeOptions{})
	collect(t, w, first, 12)
	d.Close()

	var lines []string
	notice := func(s string) { lines = append(lines, s) }
	if err := VerifyInstall(context.Background(), pristine, notice); err != nil {
		t.Fatalf("the intact install: %v", err)
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "checking the") || !strings.Contains(lines[1], "match their receipt") {
		t.Errorf("notices %q: want one before hashing and one after", lines)
	}

	same := copyInstall(t, pristine)
	if err := VerifyInstall(context.Background(), same, func(string) {}); err != nil {
		t.Fatalf("an exact copy: %v", err)
	}
	r, _ := diskEngine(t, loadDir(t, same), cache, RuntimeOptions{})
	if _, out := collect(t, r, second, 12); out.CachedTokens == 0 {
		t.Error("an exact copy (times kept) missed the intact install's entries")
	}

	for _, keepTime := range []bool{false, true} {
		damaged := copyInstall(t, pristine)
		flipMiddle(t, filepath.Join(damaged, packexperts.ResidentFile), keepTime)
		err := VerifyInstall(context.Background(), damaged, func(string) {})
		if err == nil || !strings.Contains(err.Error(), packexperts.ResidentFile) || !strings.Contains(err.Error(), "nvmai-verify --verify-install "+damaged) {
			t.Errorf("keepTime %v: VerifyInstall: %v; want a refusal naming %s and nvmai-verify", keepTime, err, packexperts.ResidentFile)
		}
		if keepTime {
			continue // same size and time: only the hash tells, and it refused
		}
		r, _ := diskEngine(t, loadDir(t, damaged), cache, RuntimeOptions{})
		if _, out := collect(t, r, second, 12); out.CachedTokens != 0 {
			t.Errorf("a damaged install resumed %d tokens of the intact install's snapshots", out.CachedTokens)
		}
	}
}
