package convert

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

func modelIDAt(t *testing.T, dir string) string {
	t.Helper()
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return m.ModelID
}

func convertNamed(src, out, id string, overwrite bool) error {
	_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, out}}, Overwrite: overwrite, ModelID: id, Threads: 2})
	return err
}

// probe C2/C3: publish renamed the old install aside and then the new one
// in; a kill between the two left no install at all. The swap is now one
// renameat2(RENAME_EXCHANGE): right after it the output is the new install
// and the old one sits under the staging name, where the sweep of dead
// writers' staging finds it if the process dies there.
func TestOverwriteSwapsInstallsAtomically(t *testing.T) {
	src := embeddedSnapshot(t)
	out := filepath.Join(t.TempDir(), "m")
	if err := convertNamed(src, out, "old", false); err != nil {
		t.Fatal(err)
	}
	killed := errors.New("killed after the exchange")
	var atExchange []string
	testHookAfterExchange = func() error {
		atExchange = append(atExchange, "m="+modelIDAt(t, out))
		staging, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".m.partial-*"))
		for _, s := range staging {
			atExchange = append(atExchange, filepath.Base(s)+"="+modelIDAt(t, s))
		}
		return killed
	}
	defer func() { testHookAfterExchange = nil }()
	if err := convertNamed(src, out, "new", true); !errors.Is(err, killed) {
		t.Fatalf("publish with a kill after the exchange: %v", err)
	}
	want := []string{"m=new", fmt.Sprintf(".m.partial-%d=old", os.Getpid())}
	if strings.Join(atExchange, " ") != strings.Join(want, " ") {
		t.Errorf("right after the exchange: %v; want %v", atExchange, want)
	}
	if got := modelIDAt(t, out); got != "new" {
		t.Errorf("after the interrupted publish the output holds %q, want the new install", got)
	}
	testHookAfterExchange = nil
	if err := convertNamed(src, out, "newer", true); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, filepath.Dir(out), "m")
}

// Where the filesystem cannot exchange, publish falls back to two renames
// and still leaves only the new install.
func TestOverwriteWithoutExchange(t *testing.T) {
	exchangeDirs = func(string, string) error { return errExchangeUnsupported }
	defer func() { exchangeDirs = exchange }()
	src := embeddedSnapshot(t)
	out := filepath.Join(t.TempDir(), "m")
	for _, id := range []string{"old", "new"} {
		if err := convertNamed(src, out, id, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := modelIDAt(t, out); got != "new" {
		t.Errorf("output holds %q, want the new install", got)
	}
	assertNoLeftovers(t, filepath.Dir(out), "m")
}

// probe C2: a .NAME.old-PID left by a killed publish was never removed. A
// dead writer's one goes once NAME holds an install again; a live writer's,
// one that is the only copy of the install (NAME missing), and anything
// nvmai did not name are left alone.
func TestSweepOfReplacedInstalls(t *testing.T) {
	live, dead := standInPIDs(t)
	cases := []struct {
		name       string
		leftover   string
		asFile     bool
		finalThere bool
		kept       bool
	}{
		{"its writer is gone and m holds an install", fmt.Sprintf(".m.old-%d", dead), false, true, false},
		{"its writer is gone and m is missing (the only copy)", fmt.Sprintf(".m.old-%d", dead), false, false, true},
		{"its writer runs", fmt.Sprintf(".m.old-%d", live), false, true, true},
		{"not a PID", ".m.old-backup", false, true, true},
		{"another output's", fmt.Sprintf(".mm.old-%d", dead), false, true, true},
		{"a file, not a directory", fmt.Sprintf(".m.old-%d", dead), true, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			out := filepath.Join(parent, "m")
			if tc.finalThere {
				mkdir(t, out)
			}
			left := filepath.Join(parent, tc.leftover)
			if tc.asFile {
				write(t, left, "precious")
			} else {
				mkdir(t, left)
				write(t, filepath.Join(left, "resident.bin"), "old install")
			}
			removeStaleStaging(out)
			_, err := os.Lstat(left)
			if kept := err == nil; kept != tc.kept {
				t.Errorf("%s kept = %v, want %v", tc.leftover, kept, tc.kept)
			}
		})
	}
}
