package convert

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
	"github.com/nvmai/nvmai/pkg/version"
)

// embeddedSnapshot copies the repository's testdata/tiny-moe-fused into a
// fresh directory, so a test that goes wrong cannot damage the original.
func embeddedSnapshot(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tiny-moe-fused")
	testfix.CopyTree(t, testfix.Embedded(t), dst)
	return dst
}

// review H1: `mkdir -p /tmp/x && echo precious > /tmp/x/thesis.txt &&
// nvmai-convert --input testdata/tiny-moe-fused --output /tmp/x --overwrite`
// deleted thesis.txt. --overwrite replaces an nvmai install and nothing else.
func TestOverwriteRefusesWhatIsNotAnInstall(t *testing.T) {
	src := embeddedSnapshot(t)
	cases := []struct {
		name    string
		prepare func(t *testing.T, out string)
		want    []string
	}{
		{"a directory with a user's file", func(t *testing.T, out string) {
			mkdir(t, out)
			write(t, filepath.Join(out, "thesis.txt"), "precious")
		}, []string{"is not an nvmai install", "1 entry: thesis.txt", "remove it yourself"}},
		{"an empty directory", func(t *testing.T, out string) { mkdir(t, out) }, []string{"is not an nvmai install", "empty directory"}},
		{"a file", func(t *testing.T, out string) { write(t, out, "precious") }, []string{"is not an nvmai install", "not a directory"}},
		{"a directory with a foreign manifest.json", func(t *testing.T, out string) {
			mkdir(t, out)
			write(t, filepath.Join(out, "manifest.json"), `{"name": "my web app"}`)
		}, []string{"is not an nvmai install", "manifest.json"}},
		{"an install with a user's file added", func(t *testing.T, out string) {
			convertInto(t, src, out, false)
			write(t, filepath.Join(out, "notes.txt"), "precious")
		}, []string{"files nvmai did not write", "notes.txt"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "x")
			tc.prepare(t, out)
			before := snapshotTree(t, out)
			for _, overwrite := range []bool{false, true} {
				_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, out}}, Overwrite: overwrite, Threads: 2})
				if !errors.Is(err, ErrNotInstall) {
					t.Fatalf("overwrite=%v: error %v, want ErrNotInstall", overwrite, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("overwrite=%v: error %q does not say %q", overwrite, err, w)
					}
				}
				if after := snapshotTree(t, out); after != before {
					t.Fatalf("overwrite=%v changed %s:\nbefore %s\nafter  %s", overwrite, out, before, after)
				}
			}
			assertNoLeftovers(t, filepath.Dir(out), "x")
		})
	}
}

// The same rule holds for synth, which goes through the same publish step.
func TestSynthOverwriteRefusesWhatIsNotAnInstall(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x")
	mkdir(t, out)
	write(t, filepath.Join(out, "thesis.txt"), "precious")
	_, err := Synth(context.Background(), SynthOptions{Geometry: "tiny-dense", Bits: 4, Output: out, Overwrite: true, Threads: 2})
	if !errors.Is(err, ErrNotInstall) || !strings.Contains(err.Error(), "thesis.txt") {
		t.Fatalf("synth --overwrite over a user's directory: %v, want ErrNotInstall naming thesis.txt", err)
	}
	if _, err := os.Stat(filepath.Join(out, "thesis.txt")); err != nil {
		t.Fatalf("thesis.txt is gone: %v", err)
	}
}

// An existing install is replaced with --overwrite, and refused without it
// with a message that says it is an install (review L16).
func TestOverwriteReplacesAnInstall(t *testing.T) {
	src := embeddedSnapshot(t)
	out := filepath.Join(t.TempDir(), "m")
	convertInto(t, src, out, false)
	_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, out}}, Threads: 2})
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "holds an nvmai install") || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("without --overwrite: %v", err)
	}
	convertInto(t, src, out, true)
	assertNoLeftovers(t, filepath.Dir(out), "m")
}

// review H2: `nvmai-convert --input testdata/tiny-moe-fused --output
// testdata/tiny-moe-fused --overwrite` destroyed the snapshot. An output that
// is the input, inside it or around it is refused before anything is written.
func TestOutputOverlappingInputIsRefused(t *testing.T) {
	cases := []struct {
		name   string
		output func(src string) string
	}{
		{"the input itself", func(src string) string { return src }},
		{"the input with a trailing ..", func(src string) string { return filepath.Join(src, "..", filepath.Base(src)) }},
		{"inside the input", func(src string) string { return filepath.Join(src, "out") }},
		{"the input's parent", func(src string) string { return filepath.Dir(src) }},
		{"through a symlink to the input", func(src string) string {
			link := filepath.Join(filepath.Dir(filepath.Dir(src)), "link")
			os.Symlink(src, link)
			return link
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := embeddedSnapshot(t)
			before := snapshotTree(t, src)
			_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, tc.output(src)}}, Overwrite: true, Threads: 2})
			if err == nil || !strings.Contains(err.Error(), "--output") || !strings.Contains(err.Error(), "--input") {
				t.Fatalf("error %v, want a refusal naming --output and --input", err)
			}
			if after := snapshotTree(t, src); after != before {
				t.Fatalf("the input changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// A Hugging Face cache snapshot links every file into ../../blobs: an output
// anywhere in the repo folder would overwrite the blobs the snapshot is.
func TestOutputInsideHFRepoFolderIsRefused(t *testing.T) {
	snap := hfCacheSnapshot(t)
	repo := filepath.Dir(filepath.Dir(snap))
	for _, out := range []string{filepath.Join(repo, "blobs"), filepath.Join(repo, "out"), repo, filepath.Dir(repo)} {
		_, err := Run(context.Background(), Options{Input: snap, Targets: []Target{{4, out}}, Overwrite: true, Threads: 2})
		if err == nil || !strings.Contains(err.Error(), "--output") {
			t.Errorf("--output %s: error %v, want a refusal", out, err)
		}
	}
	if _, err := hf.Open(snap); err != nil {
		t.Fatalf("the snapshot was damaged: %v", err)
	}
}

// hfCacheSnapshot lays the embedded model out as the Hugging Face cache does:
// models--test--tiny/{blobs/HASH, snapshots/COMMIT/NAME -> ../../blobs/HASH, refs/main}.
func hfCacheSnapshot(t *testing.T) string {
	t.Helper()
	src := testfix.Embedded(t)
	repo := filepath.Join(t.TempDir(), "hub", "models--test--tiny")
	const commit = "0123456789abcdef0123456789abcdef01234567"
	snap := filepath.Join(repo, "snapshots", commit)
	mkdir(t, filepath.Join(repo, "blobs"))
	mkdir(t, snap)
	mkdir(t, filepath.Join(repo, "refs"))
	write(t, filepath.Join(repo, "refs", "main"), commit)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		blob := strings.Repeat(string(rune('a'+i)), 8)
		write(t, filepath.Join(repo, "blobs", blob), string(data))
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

func convertInto(t *testing.T, src, out string, overwrite bool) {
	t.Helper()
	if _, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, out}}, Overwrite: overwrite, Threads: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := packexperts.ReadManifest(out); err != nil {
		t.Fatal(err)
	}
}

// snapshotTree describes every entry under dir (name, size, mode, content
// hash) so a test can tell whether anything changed.
func snapshotTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			b.WriteString(p + ": " + err.Error() + "\n")
			return nil
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + receipt.SHA256Hex(data))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// standInPIDs returns the PID of a process that runs until the test ends
// and that of one that has exited, for the writers of leftovers, skipping
// the test where no process can be started.
func standInPIDs(t *testing.T) (live, dead int) {
	t.Helper()
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Skipf("cannot start a stand-in process: %v", err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Skipf("cannot run a stand-in process: %v", err)
	}
	return sleeper.Process.Pid, gone.Process.Pid
}

// review L20: a second run for the same output deleted the first run's live
// staging directory. Only staging left by a writer that is gone is removed.
func TestStaleStagingOnlyWhenItsWriterIsGone(t *testing.T) {
	live, dead := standInPIDs(t)
	cases := []struct {
		name   string
		pid    int
		locked bool
		kept   bool
	}{
		{"its process runs", live, false, true},
		{"its process is gone but the lock is held", dead, true, true},
		{"its process is gone", dead, false, false},
		{"named with our PID and unlocked (a reused PID)", os.Getpid(), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m")
			staging := filepath.Join(filepath.Dir(out), fmt.Sprintf(".m.partial-%d", tc.pid))
			mkdir(t, staging)
			write(t, filepath.Join(staging, "resident.bin"), "half-written")
			if tc.locked {
				lock, err := lockDir(staging)
				if err != nil {
					t.Fatal(err)
				}
				defer lock.Close()
			}
			convertInto(t, embeddedSnapshot(t), out, false)
			_, err := os.Stat(filepath.Join(staging, "resident.bin"))
			if kept := err == nil; kept != tc.kept {
				t.Errorf("staging kept = %v, want %v", kept, tc.kept)
			}
		})
	}
}

// review L15: --input is checked and explained before the snapshot reader
// sees it; a Hugging Face repo folder is followed to its refs/main snapshot.
func TestInputResolution(t *testing.T) {
	install := filepath.Join(t.TempDir(), "install")
	convertInto(t, embeddedSnapshot(t), install, false)
	file := filepath.Join(t.TempDir(), "file")
	write(t, file, "x")
	cases := []struct {
		name  string
		input string
		want  string
	}{
		{"missing", "/nonexistent", "--input /nonexistent: no such directory"},
		{"a file", file, "--input " + file + " is a file"},
		{"an nvmai install", install, "--input " + install + " is an nvmai install (tiny-moe-fused, 4-bit), not a Hugging Face snapshot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), Options{Input: tc.input, Targets: []Target{{4, filepath.Join(t.TempDir(), "o")}}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("a Hugging Face repo folder", func(t *testing.T) {
		snap := hfCacheSnapshot(t)
		repo := filepath.Dir(filepath.Dir(snap))
		out := filepath.Join(t.TempDir(), "o")
		var notices []string
		_, err := Run(context.Background(), Options{Input: repo, Targets: []Target{{4, out}}, Threads: 2, Notice: func(s string) { notices = append(notices, s) }})
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := packexperts.ReadManifest(out)
		if err != nil {
			t.Fatal(err)
		}
		if m.Source.Repo != "test/tiny" || m.Source.Revision != filepath.Base(snap) {
			t.Errorf("source %s@%s, want test/tiny@%s", m.Source.Repo, m.Source.Revision, filepath.Base(snap))
		}
		if len(notices) == 0 || !strings.Contains(notices[0], "Hugging Face repo folder") {
			t.Errorf("no notice that the repo folder was followed: %q", notices)
		}
	})
}

// review M1: convert and synth write the receipt with the mode of every
// other file of the install (0644 under umask 022), not 0600.
func TestReceiptModeMatchesTheInstall(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	conv := filepath.Join(t.TempDir(), "conv")
	convertInto(t, embeddedSnapshot(t), conv, false)
	synth := synthOne(t, SynthOptions{Geometry: "tiny-dense", Bits: 4})
	for _, dir := range []string{conv, synth} {
		for _, name := range []string{packexperts.ReceiptFile, packexperts.ManifestFile, "tokenizer.json"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("%s/%s: mode %v, want 0644", filepath.Base(dir), name, fi.Mode().Perm())
			}
		}
	}
}

// review L11: every install records the nvmai build that wrote it.
func TestManifestRecordsWriter(t *testing.T) {
	conv := filepath.Join(t.TempDir(), "conv")
	convertInto(t, embeddedSnapshot(t), conv, false)
	synth := synthOne(t, SynthOptions{Geometry: "tiny-dense", Bits: 4})
	for _, dir := range []string{conv, synth} {
		m, _, err := packexperts.ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if m.WrittenBy != version.String() || m.WrittenBy == "" {
			t.Errorf("%s: written_by %q, want %q", filepath.Base(dir), m.WrittenBy, version.String())
		}
	}
}

func TestCheckOutput(t *testing.T) {
	parent := t.TempDir()
	install := filepath.Join(parent, "install")
	convertInto(t, embeddedSnapshot(t), install, false)
	user := filepath.Join(parent, "user")
	mkdir(t, user)
	write(t, filepath.Join(user, "a"), "x")
	cases := []struct {
		dir       string
		overwrite bool
		want      error
	}{
		{filepath.Join(parent, "absent"), false, nil},
		{install, false, ErrExists},
		{install, true, nil},
		{user, false, ErrNotInstall},
		{user, true, ErrNotInstall},
	}
	for _, tc := range cases {
		if err := CheckOutput(tc.dir, tc.overwrite); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Errorf("CheckOutput(%s, %v) = %v, want %v", filepath.Base(tc.dir), tc.overwrite, err, tc.want)
		}
	}
}
