package promptcache

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeFS is a filesystem of capacity bytes holding the cache directory's
// files and other bytes of other programs' files: its free space is what
// they leave, so it shrinks as entries are written.
type fakeFS struct {
	t        *testing.T
	dir      string
	capacity int64
	total    int64 // the size statfs reports (sets the margin)
	mu       sync.Mutex
	other    int64
}

// newFakeFS is a filesystem with room bytes free above the cache's margin.
func newFakeFS(t *testing.T, dir string, room int64) *fakeFS {
	const total = 10 << 30 // margin: 1 GiB
	return &fakeFS{t: t, dir: dir, capacity: FreeMargin(total) + room, total: total}
}

func (f *fakeFS) freeSpace(string) (avail, total int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity - f.other - duOf(f.t, f.dir), f.total, nil
}

// aboveMargin is the free space beyond the cache's margin (negative when
// the margin is eaten into).
func (f *fakeFS) aboveMargin() int64 {
	avail, total, _ := f.freeSpace(f.dir)
	return avail - FreeMargin(total)
}

func duOf(t *testing.T, dir string) int64 {
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, de := range des {
		if info, err := de.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// randomPayload does not compress: an entry holding it is about n bytes.
func randomPayload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

type diskOpts struct {
	budget    int64
	freeSpace FreeSpaceFunc
}

// openSpaceTest opens dir with a clock that ticks a second per call, so
// the least-recently-used order is exact, and captures the log.
func openSpaceTest(t *testing.T, dir string, o diskOpts) (*Disk, *syncLog) {
	t.Helper()
	logs := &syncLog{}
	d, err := OpenDisk(DiskOptions{Dir: dir, Budget: o.budget, FreeSpace: o.freeSpace, Log: logs.printf})
	if err != nil {
		t.Fatal(err)
	}
	var tick time.Duration
	start := time.Now()
	d.now = func() time.Time { tick += time.Second; return start.Add(tick) }
	t.Cleanup(d.Close)
	return d, logs
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) printf(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, f+"\n", a...)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, _ := os.ReadDir(dir)
	var names []string
	for _, de := range des {
		if tempName.MatchString(de.Name()) {
			names = append(names, de.Name())
		}
	}
	return names
}

// countingCreate counts temporary files created (and wraps them with wrap
// when set).
type countingCreate struct {
	mu    sync.Mutex
	n     int
	modes []os.FileMode
	wrap  func(entryFile) entryFile
}

func (c *countingCreate) create(p string) (entryFile, error) {
	f, err := createEntryFile(p)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if info, err := os.Stat(p); err == nil {
		c.modes = append(c.modes, info.Mode().Perm())
	}
	if c.wrap != nil {
		return c.wrap(f), nil
	}
	return f, nil
}

func (c *countingCreate) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// D9: with a budget far above the free space, the cache never lets the
// filesystem's free space fall below the margin: it evicts the least
// recently used entries as a new one grows. A cache opened on a
// filesystem another program filled gives space back at once.
func TestDiskKeepsFreeSpaceMargin(t *testing.T) {
	const entry = 100 << 10
	dir := t.TempDir()
	fs := newFakeFS(t, dir, 5*entry/2) // room for two entries, not three
	d, logs := openSpaceTest(t, dir, diskOpts{budget: 20 << 30, freeSpace: fs.freeSpace})
	for i := range 6 {
		if err := d.Put(testKey, seq(20, 100*i), encoderOf(randomPayload(entry, uint64(i)))); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if free := fs.aboveMargin(); free < 0 {
			t.Fatalf("after entry %d the filesystem is %d bytes into the margin", i, -free)
		}
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	for i := range 6 {
		n, _ := get(d, testKey, seq(20, 100*i))
		if want := i >= 4; (n == 20) != want {
			t.Errorf("entry %d: hit %v, want %v (the two most recent stay)", i, n == 20, want)
		}
	}
	if st := d.Stats(); st.Evictions != 4 || st.Entries != 2 {
		t.Errorf("stats %+v: want 4 evictions, 2 entries", st)
	}
	d.Close()

	fs.mu.Lock()
	fs.other = entry // another program takes space: one entry must go
	fs.mu.Unlock()
	d2, logs2 := openSpaceTest(t, dir, diskOpts{budget: 20 << 30, freeSpace: fs.freeSpace})
	if free := fs.aboveMargin(); free < 0 {
		t.Errorf("after reopening the filesystem is %d bytes into the margin\n%s", -free, logs2)
	}
	if n, _ := get(d2, testKey, seq(20, 500)); n != 20 {
		t.Errorf("the most recent entry was evicted\n%s%s", logs, logs2)
	}
	if st := d2.Stats(); st.Entries != 1 {
		t.Errorf("after reopening: %d entries, want 1", st.Entries)
	}
}

// A filesystem with less than the margin free gets no entry at all:
// nothing is created, and it is said once.
func TestDiskWritesNothingWithoutRoom(t *testing.T) {
	dir := t.TempDir()
	fs := newFakeFS(t, dir, -1)
	d, logs := openSpaceTest(t, dir, diskOpts{budget: 20 << 30, freeSpace: fs.freeSpace})
	cc := &countingCreate{}
	d.create = cc.create
	for i := range 3 {
		err := d.Put(testKey, seq(20, i), encoderOf([]byte("x")))
		var noRoom *noRoomError
		if !errors.As(err, &noRoom) {
			t.Fatalf("Put %d: %v, want no room", i, err)
		}
	}
	if cc.count() != 0 {
		t.Errorf("%d temporary files created with no room", cc.count())
	}
	if n := strings.Count(logs.String(), "nothing is written"); n != 1 {
		t.Errorf("the lack of room was logged %d times, want once:\n%s", n, logs)
	}
	if st := d.Stats(); st.NoRoom != 3 {
		t.Errorf("stats %+v: want 3 no_room", st)
	}
}

// enospcFile fails writes with ENOSPC once after bytes were written.
type enospcFile struct {
	entryFile
	after int64
	n     int64
}

func (f *enospcFile) Write(b []byte) (int, error) {
	if f.n+int64(len(b)) > f.after {
		return 0, &os.PathError{Op: "write", Path: "fake", Err: syscall.ENOSPC}
	}
	n, err := f.entryFile.Write(b)
	f.n += int64(n)
	return n, err
}

// D9: a write that finds the filesystem full (the free space said
// otherwise: quotas, another writer) removes its temporary file, evicts
// the least recently used entries, and is not retried; the next entry is
// written.
func TestDiskFullFilesystemEvictsAndDoesNotRetry(t *testing.T) {
	dir := t.TempDir()
	d, logs := openSpaceTest(t, dir, diskOpts{budget: 20 << 30, freeSpace: newFakeFS(t, dir, 1<<30).freeSpace})
	for i := range 3 {
		if err := d.Put(testKey, seq(20, 100*i), encoderOf(randomPayload(50<<10, uint64(i)))); err != nil {
			t.Fatal(err)
		}
	}
	cc := &countingCreate{wrap: func(f entryFile) entryFile { return &enospcFile{entryFile: f, after: 30 << 10} }}
	d.create = cc.create
	if !d.Enqueue(testKey, seq(20, 900), encoderOf(randomPayload(80<<10, 9))) {
		t.Fatal("not queued")
	}
	d.Flush()
	if cc.count() != 1 {
		t.Errorf("the entry was tried %d times, want once", cc.count())
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	if n, _ := get(d, testKey, seq(20, 0)); n != 0 {
		t.Error("the least recently used entry was not evicted on ENOSPC")
	}
	if n, _ := get(d, testKey, seq(20, 200)); n != 20 {
		t.Error("the most recent entry was evicted too")
	}
	st := d.Stats()
	if st.WriteErrors != 1 || st.Evictions == 0 {
		t.Errorf("stats %+v: want 1 write error and an eviction", st)
	}
	if !strings.Contains(logs.String(), "no space left on device") || !strings.Contains(logs.String(), "the filesystem is full") {
		t.Errorf("log:\n%s", logs)
	}
	d.create = createEntryFile
	if err := d.Put(testKey, seq(20, 901), encoderOf(randomPayload(80<<10, 10))); err != nil {
		t.Fatalf("the next entry after ENOSPC: %v", err)
	}

	// No room even for the file's inode: the same.
	before := d.Stats().Evictions
	d.create = func(string) (entryFile, error) {
		return nil, &os.PathError{Op: "open", Path: "fake", Err: syscall.ENOSPC}
	}
	if err := d.Put(testKey, seq(20, 902), encoderOf(nil)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("create failing with ENOSPC: %v", err)
	}
	if d.Stats().Evictions != before+1 {
		t.Errorf("create failing with ENOSPC evicted %d entries, want 1", d.Stats().Evictions-before)
	}
}

// D11: an entry larger than the budget is abandoned before it is synced
// or renamed, evicts nothing, and longer entries under its key are not
// even started; shorter ones still are.
func TestDiskEntryLargerThanBudgetIsNotWritten(t *testing.T) {
	dir := t.TempDir()
	d, logs := openSpaceTest(t, dir, diskOpts{budget: 64 << 10, freeSpace: newFakeFS(t, dir, 1<<30).freeSpace})
	if err := d.Put(testKey, seq(10, 0), encoderOf(randomPayload(10<<10, 1))); err != nil {
		t.Fatal(err)
	}
	cc := &countingCreate{}
	d.create = cc.create
	var noRoom *noRoomError
	if err := d.Put(testKey, seq(100, 1000), encoderOf(randomPayload(200<<10, 2))); !errors.As(err, &noRoom) {
		t.Fatalf("an entry over the budget: %v, want no room", err)
	}
	if err := d.Put(testKey, seq(120, 2000), encoderOf(randomPayload(200<<10, 3))); !errors.As(err, &noRoom) {
		t.Fatalf("a longer entry over the budget: %v, want no room", err)
	}
	if cc.count() != 1 {
		t.Errorf("%d temporary files created, want 1 (the longer entry is not started)", cc.count())
	}
	if tmp := tempFiles(t, dir); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	if n, _ := get(d, testKey, seq(10, 0)); n != 10 {
		t.Error("the entry within the budget was evicted for one that did not fit")
	}
	if n := strings.Count(logs.String(), "is not written"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "budget") {
		t.Errorf("the log does not name the budget:\n%s", logs)
	}
	if err := d.Put(testKey, seq(50, 3000), encoderOf(randomPayload(20<<10, 4))); err != nil {
		t.Fatalf("a shorter entry within the budget: %v", err)
	}
	if st := d.Stats(); st.NoRoom != 2 || st.Evictions != 0 || st.Entries != 2 {
		t.Errorf("stats %+v: want 2 no_room, no eviction, 2 entries", st)
	}
}

// D13: the directory (and the parents the cache creates) are 0700, and
// entries and temporary files 0600, whatever the umask; an existing
// directory holding only cache files is made private, entries an older
// version wrote 0644 become 0600, and a directory holding other files
// keeps its mode, with a warning.
func TestDiskFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	d, _ := openSpaceTest(t, dir, diskOpts{budget: 1 << 30})
	cc := &countingCreate{}
	d.create = cc.create
	if err := d.Put(testKey, seq(10, 0), encoderOf([]byte("secret conversation"))); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, p := range []string{dir, filepath.Join(root, "a")} {
		if m := mode(t, p); m != 0o700 {
			t.Errorf("%s: mode %#o, want 0700", p, m)
		}
	}
	if len(cc.modes) != 1 || cc.modes[0] != 0o600 {
		t.Errorf("temporary file modes %#o, want [0600]", cc.modes)
	}
	entries := entryFiles(t, dir)
	if len(entries) != 1 {
		t.Fatalf("entries %v", entries)
	}
	entry := filepath.Join(dir, entries[0])
	if m := mode(t, entry); m != 0o600 {
		t.Errorf("entry mode %#o, want 0600", m)
	}

	// As an older version left it.
	chmod(t, dir, 0o755)
	chmod(t, entry, 0o644)
	d, logs := openSpaceTest(t, dir, diskOpts{budget: 1 << 30})
	d.Close()
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("an existing 0755 cache directory: mode %#o, want 0700\n%s", m, logs)
	}
	if m := mode(t, entry); m != 0o600 {
		t.Errorf("an existing 0644 entry: mode %#o, want 0600", m)
	}

	// Not only ours: left alone, said.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, 0o755)
	d, logs = openSpaceTest(t, dir, diskOpts{budget: 1 << 30})
	d.Close()
	if m := mode(t, dir); m != 0o755 {
		t.Errorf("a directory holding another file: mode %#o, want 0755 kept", m)
	}
	if !strings.Contains(logs.String(), "open to other users") {
		t.Errorf("no warning:\n%s", logs)
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

// D14: a path that is not a directory is refused, and so is one that
// exists but was not created (no directory is made in a file's place).
func TestDiskRefusesNonDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "sub")} {
		if _, err := OpenDisk(DiskOptions{Dir: dir, Budget: 1 << 20}); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("%s: %v, want a 'not a directory' error", dir, err)
		}
	}
	if raw, _ := os.ReadFile(file); string(raw) != "keep me" {
		t.Error("the file was changed")
	}
}

// The platform's free space is read (statfs), and the margin is 5 % of
// the filesystem between 1 and 10 GiB.
func TestFreeSpaceAndMargin(t *testing.T) {
	avail, total, err := statfsFreeSpace(t.TempDir())
	if err != nil {
		t.Skipf("no free space on this platform: %v", err)
	}
	if total <= 0 || avail < 0 || avail > total {
		t.Errorf("statfs: %d available of %d", avail, total)
	}
	for _, c := range []struct{ total, want int64 }{
		{20 << 20, 1 << 30}, {10 << 30, 1 << 30}, {100 << 30, 5 << 30}, {2 << 40, 10 << 30},
	} {
		if got := FreeMargin(c.total); got != c.want {
			t.Errorf("FreeMargin(%d) = %d, want %d", c.total, got, c.want)
		}
	}
}

var _ io.Writer = (*enospcFile)(nil)
