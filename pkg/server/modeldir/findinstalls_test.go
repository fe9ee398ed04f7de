package modeldir

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestFindInstallsStaysInsideDir: links out of the directory, link loops,
// second links to one install and a FIFO manifest are each passed over
// with a notice naming them, and a link to an install elsewhere inside the
// directory is still served.
func TestFindInstallsStaysInsideDir(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "models")
	manifest := func(dir string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	manifest(filepath.Join(root, "org", "a"))
	manifest(filepath.Join(root, "b"))
	manifest(filepath.Join(root, ".hidden", "c"))
	manifest(filepath.Join(base, "elsewhere", "outside"))
	if err := os.MkdirAll(filepath.Join(root, "fifo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo", "manifest.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	link("..", "org/up")                          // a loop back to root
	link(".", "loop")                             // root itself
	link("org/a", "alias")                        // a second path to org/a
	link(".hidden/c", "c-link")                   // inside, reachable only through the link
	link(filepath.Join(base, "elsewhere"), "out") // outside DIR
	link("/", "slash")                            // outside DIR: every install on the machine
	link("nowhere", "broken")
	link("b/manifest.json", "file-link") // a link to a file is not an install

	var notes []string
	ids, err := findInstalls(root, func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"b", "c-link", "org/a"}; !slices.Equal(ids, want) {
		t.Errorf("ids %q, want %q", ids, want)
	}
	for _, want := range []string{
		filepath.Join(root, "fifo") + " is not served: manifest.json is not a regular file (p",
		filepath.Join(root, "org/up") + " is the same directory as " + root,
		filepath.Join(root, "loop") + " is the same directory as " + root,
		filepath.Join(root, "alias") + " is the same directory as " + filepath.Join(root, "org/a"),
		filepath.Join(root, "out") + " is not searched: it is a symbolic link to " + filepath.Join(base, "elsewhere") + ", outside",
		filepath.Join(root, "slash") + " is not searched: it is a symbolic link to /, outside",
		filepath.Join(root, "broken") + " is not searched: a symbolic link that does not resolve",
	} {
		found := 0
		for _, n := range notes {
			if strings.HasPrefix(n, want) {
				found++
			}
		}
		if found != 1 {
			t.Errorf("notice %q appears %d times, want once; notices:\n%s", want, found, strings.Join(notes, "\n"))
		}
	}
	if len(notes) != 7 {
		t.Errorf("%d notices, want 7:\n%s", len(notes), strings.Join(notes, "\n"))
	}
}

// A models directory given through a link is searched as usual; links
// inside it are judged against where it really is.
func TestFindInstallsRootThroughALink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.MkdirAll(filepath.Join(real, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "m", "manifest.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("m", filepath.Join(real, "m-alias")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "via")); err != nil {
		t.Fatal(err)
	}
	var notes []string
	ids, err := findInstalls(filepath.Join(base, "via"), func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) })
	if err != nil || !slices.Equal(ids, []string{"m"}) {
		t.Errorf("ids %q, %v; want [m]", ids, err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "m-alias is the same directory as") {
		t.Errorf("notices %q, want one about m-alias", notes)
	}
}

// A subdirectory that cannot be read is reported and the rest is served.
func TestFindInstallsUnreadableSubdirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every directory")
	}
	root := t.TempDir()
	for _, d := range []string{"ok", "locked/x"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "ok", "manifest.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "locked"), 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "locked"), 0o755) })
	var notes []string
	ids, err := findInstalls(root, func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) })
	if err != nil || !slices.Equal(ids, []string{"ok"}) {
		t.Errorf("ids %q, %v; want [ok]", ids, err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "locked") {
		t.Errorf("notices %q, want one naming locked", notes)
	}
}
