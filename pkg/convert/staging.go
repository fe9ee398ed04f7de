package convert

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A staging directory is a hidden sibling of the final directory,
// .NAME.partial-PID, so a failed or interrupted conversion never leaves
// anything that looks like an install. The writing process holds an
// exclusive flock on the directory itself until it has published or
// removed it: another run for the same output (or a later one cleaning up
// after a crash) tells a live staging directory from a stale one by that
// lock and by the PID in its name.

func stagingDir(final string) string {
	return filepath.Join(filepath.Dir(final), stagingPrefix(final)+strconv.Itoa(os.Getpid()))
}

func stagingPrefix(final string) string { return "." + filepath.Base(final) + ".partial-" }

// replacedPrefix names where publish, when it cannot swap atomically, moves
// the install it replaces: .NAME.old-PID.
func replacedPrefix(final string) string { return "." + filepath.Base(final) + ".old-" }

// createStaging makes this process's staging directory for final and locks
// it; the caller closes the returned file once done with the directory.
func createStaging(final string) (string, *os.File, error) {
	dir := stagingDir(final)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("creating the staging directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("locking the staging directory %s: %w", dir, err)
	}
	return dir, lock, nil
}

// lockDir takes an exclusive, non-blocking flock on dir.
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// removeStaleStaging deletes the staging directories that earlier runs for
// final left behind when they died (SIGKILL, out of memory, power loss).
// One whose writer still runs (it holds the lock, or the process of its
// PID is alive) is left alone. A directory named with this process's own
// PID is stale unless this process holds its lock (a crashed run whose PID
// was reused).
func removeStaleStaging(final string) {
	prefix := stagingPrefix(final)
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(final), prefix+"*"))
	for _, dir := range matches {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), prefix))
		if err != nil || pid != os.Getpid() && processAlive(pid) {
			continue // not ours to judge, or its writer runs
		}
		lock, err := lockDir(dir)
		if err != nil {
			continue // locked: its writer lives (in another PID namespace, say)
		}
		os.RemoveAll(dir)
		lock.Close()
	}
	removeReplaced(final)
}

// removeReplaced deletes the .NAME.old-PID directories of writers that died
// after moving the install at final aside (or while deleting it), once
// final holds an install again: what they held was replaced. While final
// is missing, such a directory is the only copy of the previous install,
// and is left for its owner (nvmai-install lists it).
func removeReplaced(final string) {
	if fi, err := os.Lstat(final); err != nil || !fi.IsDir() {
		return
	}
	prefix := replacedPrefix(final)
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(final), prefix+"*"))
	for _, dir := range matches {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), prefix))
		if err != nil || pid <= 0 || pid != os.Getpid() && processAlive(pid) {
			continue // not ours to judge, or its writer runs
		}
		if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
			os.RemoveAll(dir)
		}
	}
}

// processAlive reports whether a process with this PID exists (EPERM means
// it exists under another user).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// errExchangeUnsupported means the system cannot swap two directory entries
// atomically.
var errExchangeUnsupported = errors.New("atomic exchange of two directories is not supported here")
