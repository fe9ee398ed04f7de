package server

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/promptcache"
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
	testfix.FlipByte(t, p, testfix.Middle, 0x5a)
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

// The disk key names the engine and device: a GPU server and a CPU server
// at --kv-bits 32 sharing a --prompt-cache-dir never look up each other's
// entries. They used to share a key, so each read the other's snapshot,
// its reader refused it by magic, and the disk cache deleted the entry as
// damaged. Cards of another kind get keys of their own; the same engine
// gets the same key every time.
func TestDiskKeyNamesTheEngine(t *testing.T) {
	e := tinyEngine(t)
	dir, cpu := e.Install.Dir, e.Info()
	gpu := func(name string) model.Info {
		in := cpu
		in.Device, in.Name = model.GPU, name
		return in
	}
	engines := []struct {
		name string
		info model.Info
	}{
		{"cpu", cpu},
		{"H100", gpu("gpu (NVIDIA H100 80GB HBM3, sm_90)")},
		{"H200", gpu("gpu (NVIDIA H200, sm_90)")},
	}
	keys := map[promptcache.Key]string{}
	for _, en := range engines {
		k, err := diskKey(dir, en.info, PlainChatMLSHA256(), model.KVFloat32)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := diskKey(dir, en.info, PlainChatMLSHA256(), model.KVFloat32); again != k {
			t.Errorf("%s: the key changed between two calls", en.name)
		}
		if other, ok := keys[k]; ok {
			t.Errorf("%s and %s share a disk key", en.name, other)
		}
		keys[k] = en.name
	}
	if k, _ := DiskKey(e, PlainChatMLSHA256(), model.KVFloat32); keys[k] != "cpu" {
		t.Errorf("DiskKey of the CPU engine is not its diskKey")
	}

	// A GPU server's entry in the directory is neither resumed nor
	// deleted by a CPU server at the same KV width.
	cacheDir := t.TempDir()
	tok := e.Tokenizer
	prompt := tok.Encode("<|im_start|>system\nYou are a coding agent with tools.<|im_end|>\n<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\n")
	gpuKey, _ := diskKey(dir, engines[1].info, PlainChatMLSHA256(), model.KVFloat32)
	d := openDisk(t, cacheDir)
	if err := d.Put(gpuKey, prompt[:len(prompt)-1], func(w io.Writer) error {
		_, err := w.Write([]byte("NGPS, a GPU state the CPU cannot read"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	written := entryFiles(t, cacheDir)
	r, _ := diskEngine(t, e, cacheDir, RuntimeOptions{KVBits: model.KVFloat32})
	if _, out := collect(t, r, prompt, 4); out.CachedTokens != 0 {
		t.Errorf("the CPU server resumed %d tokens from the GPU server's entry", out.CachedTokens)
	}
	if st := r.DiskCacheStats(); st.Corrupt != 0 {
		t.Errorf("the CPU server read the GPU server's entry and found it damaged: %+v", st)
	}
	for _, p := range written {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the GPU server's entry is gone: %v", err)
		}
	}
}
