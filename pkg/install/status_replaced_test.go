package install

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// probe C2/C3: a .NAME.old-PID left by a publish that was killed was not
// listed. It is, with its size, and when NAME itself is missing the status
// says how to put the previous install back.
func TestStatusListsReplacedInstalls(t *testing.T) {
	models := t.TempDir()
	pid := strconv.Itoa(deadPID(t))
	if err := os.MkdirAll(filepath.Join(models, "tiny-4bit"), 0o755); err != nil {
		t.Fatal(err)
	}
	superseded := filepath.Join(models, ".tiny-4bit.old-"+pid)
	orphan := filepath.Join(models, ".tiny-8bit.old-"+pid)
	for _, d := range []string{superseded, orphan} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "resident.bin"), make([]byte, 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := ReadStatus(models)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Stale) != 2 {
		t.Fatalf("stale %+v, want both .old- directories", rep.Stale)
	}
	var out bytes.Buffer
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	final8 := filepath.Join(models, "tiny-8bit")
	for _, w := range []string{
		"4.0 MiB in all",
		superseded + "  2.0 MiB, an install that " + filepath.Join(models, "tiny-4bit") + " replaced",
		"rm -rf " + superseded,
		orphan + "  2.0 MiB, the previous install of " + final8 + ", which is missing",
		"mv " + orphan + " " + final8,
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("status lacks %q:\n%s", w, out.String())
		}
	}
}
