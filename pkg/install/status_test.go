package install

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/registry"
)

// convertEmbedded writes the embedded model to dir as a 4-bit install with
// the given identity.
func convertEmbedded(t *testing.T, dir, modelID, repoID string) {
	t.Helper()
	_, err := convert.Run(context.Background(), convert.Options{Input: embeddedModel(t),
		Targets: []convert.Target{{Bits: 4, Dir: dir}}, ModelID: modelID, Repo: repoID,
		Revision: strings.Repeat("c", 40), Tool: "install tests", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
}

// deadPID is the id of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	return cmd.Process.Pid
}

// The status table goes by manifests, not folder names; it lists other
// installs and stale staging directories, never live ones.
func TestStatusGoesByManifest(t *testing.T) {
	models := t.TempDir()
	// The review's case: a tiny model copied under a registry name.
	convertEmbedded(t, filepath.Join(models, "qwen35-2b-4bit"), "tiny-moe-fused", "")
	// A real qwen35-4b install in a folder of another name, by its repo.
	convertEmbedded(t, filepath.Join(models, "mine", "small"), "Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-4B")
	dead := filepath.Join(models, ".qwen35-9b-8bit.partial-"+strconv.Itoa(deadPID(t)))
	live := filepath.Join(models, ".qwen35-9b-4bit.partial-"+strconv.Itoa(os.Getpid()))
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "resident.bin"), make([]byte, 3<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	rep, err := ReadStatus(models)
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string][]int{}
	for _, s := range rep.Models {
		for w := range s.Installed {
			installed[s.Entry.Name] = append(installed[s.Entry.Name], w)
		}
	}
	if len(installed) != 1 || len(installed["qwen35-4b"]) != 1 || installed["qwen35-4b"][0] != 4 {
		t.Errorf("installed %v, want only qwen35-4b at 4 bits", installed)
	}
	if len(rep.Others) != 1 || rep.Others[0].ModelID != "tiny-moe-fused" {
		t.Errorf("others %+v, want the tiny model", rep.Others)
	}
	if len(rep.Stale) != 1 || rep.Stale[0].Dir != dead || rep.Stale[0].Bytes != 3<<20 {
		t.Errorf("stale %+v, want only %s with 3 MiB", rep.Stale, dead)
	}
	var out bytes.Buffer
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"DOWNLOAD", "INSTALL 4-BIT", "~18.7 GiB", "~34.3 GiB",
		filepath.Join(models, "qwen35-2b-4bit") + "  tiny-moe-fused, 4-bit, converted from a local folder",
		dead + "  3.0 MiB", "remove with: rm -rf " + dead,
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("status lacks %q:\n%s", w, out.String())
		}
	}
	if strings.Contains(out.String(), live) {
		t.Errorf("status lists the live staging directory %s", live)
	}
	for _, d := range []string{dead, live} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("status touched %s: %v", d, err)
		}
	}
}

func TestStatusOfAMissingModelsDirIsEmpty(t *testing.T) {
	rep, err := ReadStatus(filepath.Join(t.TempDir(), "absent"))
	if err != nil || len(rep.Others) != 0 || len(rep.Stale) != 0 || len(rep.Models) != len(registry.All()) {
		t.Fatalf("%+v, %v", rep, err)
	}
}

// Every geometry the registry names exists, and the sizes agree with the
// 35B-A3B figures docs/synthetic.md gives (18.7 / 34.3 / 64.6 GiB).
func TestEntrySizes(t *testing.T) {
	const gib = 1 << 30
	for _, e := range registry.All() {
		s := EntrySizes(e)
		if e.Geometry != "" && (s.Download <= 0 || len(s.Install) != len(e.Widths)) {
			t.Errorf("%s: geometry %q gives sizes %+v", e.Name, e.Geometry, s)
		}
		if e.Geometry != "qwen3.5-35b-a3b" {
			continue
		}
		for w, want := range map[int]float64{4: 18.7, 8: 34.3, 16: 64.6} {
			got := float64(s.Install[w]) / gib
			if w == 16 {
				got = float64(s.Download) / gib
			}
			if got < want-0.05 || got > want+0.05 {
				t.Errorf("%s %d-bit: %.2f GiB, docs/synthetic.md says %.1f", e.Name, w, got, want)
			}
		}
	}
}

// Each install is reported once, on stdout, with its state.
func TestWriteResults(t *testing.T) {
	var out bytes.Buffer
	WriteResults(&out, []Result{{Width: 4, Dir: "m/x-4bit", Commit: strings.Repeat("a", 40)}, {Width: 8, Dir: "m/x-8bit", Reused: true}})
	want := "m/x-4bit: 4-bit installed and verified (commit aaaaaaaaaaaa…)\n" +
		"m/x-8bit: 8-bit already installed and verified; pass --overwrite to rebuild it\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
