package promptcache

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var testKey = Key{Model: [32]byte{1}, Template: [32]byte{2}, KVBits: 8}

// payloadFor is a stand-in snapshot: bytes that depend on the prefix, long
// enough to span several zstd blocks.
func payloadFor(ids []int) []byte {
	var b bytes.Buffer
	for i := range 50_000 {
		fmt.Fprintf(&b, "%d:%d,", len(ids), i*ids[i%len(ids)])
	}
	return b.Bytes()
}

func encoderOf(p []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(p); return err }
}

func openTest(t *testing.T, dir string, budget int64) (*Disk, *strings.Builder) {
	t.Helper()
	var mu sync.Mutex
	logs := &strings.Builder{}
	d, err := OpenDisk(DiskOptions{Dir: dir, Budget: budget, Log: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(logs, f+"\n", a...)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d, logs
}

// get returns the decoded payload of the longest entry for ids, or nil.
func get(d *Disk, key Key, ids []int) (int, []byte) {
	var got []byte
	n, ok := d.Get(key, ids, 0, func(r io.Reader) error {
		var err error
		got, err = io.ReadAll(r)
		return err
	})
	if !ok {
		return 0, nil
	}
	return n, got
}

func seq(n, from int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = from + i
	}
	return ids
}

func entryFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if entryName.MatchString(de.Name()) {
			names = append(names, de.Name())
		}
	}
	return names
}

// An entry written by one Disk is found by another over the same directory
// (a restart): the longest prefix of the prompt, with its exact payload;
// another key or a prompt that differs inside the prefix misses.
func TestDiskRestartHitsLongestPrefixUnderItsKeyOnly(t *testing.T) {
	dir := t.TempDir()
	d, _ := openTest(t, dir, 1<<30)
	long, short := seq(300, 7), seq(120, 7)
	for _, ids := range [][]int{short, long} {
		if err := d.Put(testKey, ids, encoderOf(payloadFor(ids))); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	r, _ := openTest(t, dir, 1<<30)
	if st := r.Stats(); st.Entries != 2 || st.Bytes == 0 {
		t.Fatalf("reopened: %+v", st)
	}
	prompt := append(slices.Clone(long), 1, 2, 3)
	if n, got := get(r, testKey, prompt); n != len(long) || !bytes.Equal(got, payloadFor(long)) {
		t.Fatalf("hit %d tokens (%d bytes), want the %d-token entry", n, len(got), len(long))
	}
	diverged := slices.Clone(prompt)
	diverged[200] = 1
	if n, got := get(r, testKey, diverged); n != len(short) || !bytes.Equal(got, payloadFor(short)) {
		t.Fatalf("a prompt diverging at 200 hit %d tokens, want %d", n, len(short))
	}
	for name, k := range map[string]Key{
		"another install":  {Model: [32]byte{9}, Template: testKey.Template, KVBits: 8},
		"another template": {Model: testKey.Model, Template: [32]byte{9}, KVBits: 8},
		"another KV width": {Model: testKey.Model, Template: testKey.Template, KVBits: 16},
	} {
		if n, _ := get(r, k, prompt); n != 0 {
			t.Errorf("%s hit %d tokens", name, n)
		}
	}
	if n, _ := get(r, testKey, seq(119, 7)); n != 0 {
		t.Errorf("a prompt shorter than every entry hit %d tokens", n)
	}
	if st := r.Stats(); st.Hits != 2 || st.Misses != 4 || st.Corrupt != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Damage of every kind is detected when read: the entry is a miss, its
// file removed and a line logged; the next shorter entry is used instead.
func TestDiskDamagedEntryIsRemovedNotUsed(t *testing.T) {
	long, short := seq(300, 1), seq(100, 1)
	damage := map[string]func(p string, size int64) error{
		"payload byte flipped": func(p string, size int64) error { return flipByte(p, size-40) },
		"header byte flipped":  func(p string, size int64) error { return flipByte(p, 100) },
		"truncated":            func(p string, size int64) error { return os.Truncate(p, size-1) },
		"cut to the header":    func(p string, size int64) error { return os.Truncate(p, headerSize) },
		"extended":             func(p string, size int64) error { return appendBytes(p, []byte{0}) },
	}
	for name, hurt := range damage {
		for _, afterOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/after-open=%v", name, afterOpen), func(t *testing.T) {
				dir := t.TempDir()
				w, _ := openTest(t, dir, 1<<30)
				for _, ids := range [][]int{short, long} {
					if err := w.Put(testKey, ids, encoderOf(payloadFor(ids))); err != nil {
						t.Fatal(err)
					}
				}
				w.Close()
				p := filepath.Join(dir, fileName(testKey, len(long), prefixHash(long)))
				info, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if !afterOpen {
					if err := hurt(p, info.Size()); err != nil {
						t.Fatal(err)
					}
				}
				r, logs := openTest(t, dir, 1<<30)
				if afterOpen {
					if err := hurt(p, info.Size()); err != nil {
						t.Fatal(err)
					}
				}
				if n, got := get(r, testKey, long); n != len(short) || !bytes.Equal(got, payloadFor(short)) {
					t.Fatalf("hit %d tokens, want the undamaged %d-token entry", n, len(short))
				}
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("the damaged entry is still there (%v)", err)
				}
				if st := r.Stats(); st.Corrupt != 1 || st.Entries != 1 {
					t.Errorf("stats %+v", st)
				}
				if !strings.Contains(logs.String(), "removed") {
					t.Errorf("nothing logged: %q", logs.String())
				}
			})
		}
	}
}

func flipByte(p string, at int64) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		return err
	}
	b[0] ^= 0x10
	_, err = f.WriteAt(b, at)
	return err
}

func appendBytes(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(b)
	return err
}

// The budget keeps the most recently used entries (a hit counts as a use,
// and the order survives a restart); files that are not the cache's own
// are never deleted, whatever the budget.
func TestDiskBudgetEvictsLeastRecentlyUsedAndOnlyItsOwnFiles(t *testing.T) {
	dir := t.TempDir()
	foreign := map[string][]byte{
		"notes.txt": []byte("mine"),
		fileName(testKey, 5, prefixHash(seq(5, 0))):       []byte("named like an entry, not one"),
		".nvmai-pc-" + strings.Repeat("0", 64) + ".1.tmp": []byte("named like a temporary file"),
	}
	for name, b := range foreign {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-2 * staleTemp)
		os.Chtimes(filepath.Join(dir, name), old, old)
	}
	a, b, c := seq(100, 0), seq(100, 1000), seq(100, 2000)
	probe, _ := openTest(t, dir, 1<<30)
	if err := probe.Put(testKey, a, encoderOf(payloadFor(a))); err != nil {
		t.Fatal(err)
	}
	size := probe.Stats().Bytes
	probe.Close()
	clock := time.Now()
	d, _ := openTest(t, dir, 2*size+size/2) // room for two
	d.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	for _, ids := range [][]int{b} {
		if err := d.Put(testKey, ids, encoderOf(payloadFor(ids))); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := get(d, testKey, a); n != len(a) { // a is now newer than b
		t.Fatalf("a: hit %d", n)
	}
	if err := d.Put(testKey, c, encoderOf(payloadFor(c))); err != nil {
		t.Fatal(err)
	}
	d.Close()
	r, _ := openTest(t, dir, 2*size+size/2)
	for ids, want := range map[*[]int]bool{&a: true, &b: false, &c: true} {
		if n, _ := get(r, testKey, *ids); (n > 0) != want {
			t.Errorf("entry from %d: present %v, want %v", (*ids)[0], n > 0, want)
		}
	}
	r.Close()
	tiny, _ := openTest(t, dir, 1) // smaller than any entry: every entry goes
	if st := tiny.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Errorf("over a 1-byte budget: %+v", st)
	}
	if got := entryFiles(t, dir); len(got) != 1 { // the foreign one named like an entry
		t.Errorf("entry-named files left: %v", got)
	}
	for name, want := range foreign {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s was touched: %q, %v", name, got, err)
		}
	}
}

// Background writes: Enqueue never blocks, a full queue drops the write,
// Flush waits for the queued ones, and entries written concurrently with
// lookups are found afterwards (run with -race).
func TestDiskEnqueueIsBoundedAndConcurrent(t *testing.T) {
	dir := t.TempDir()
	d, _ := openTest(t, dir, 1<<30)
	release := make(chan struct{})
	slow := func(p []byte) func(io.Writer) error {
		return func(w io.Writer) error { <-release; _, err := w.Write(p); return err }
	}
	var queued []int
	for i := range 6 {
		ids := seq(50, 100*i)
		if d.Enqueue(testKey, ids, slow(payloadFor(ids))) {
			queued = append(queued, i)
		}
	}
	if st := d.Stats(); len(queued) > 3 || st.Dropped == 0 {
		t.Fatalf("queued %v with a queue of 2 and one in the writer; stats %+v", queued, st)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(d, testKey, seq(50, 100*i))
		}()
	}
	close(release)
	wg.Wait()
	d.Flush()
	for _, i := range queued {
		if n, _ := get(d, testKey, seq(50, 100*i)); n != 50 {
			t.Errorf("queued entry %d not found after Flush", i)
		}
	}
	if d.Enqueue(testKey, seq(50, 100*queued[0]), encoderOf(nil)) {
		t.Error("an entry already on disk was queued again")
	}
	d.Close()
	if d.Enqueue(testKey, seq(50, 9999), encoderOf(nil)) {
		t.Error("Enqueue after Close accepted a write")
	}
}

// A failed encoder leaves no file behind.
func TestDiskFailedWriteLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	d, _ := openTest(t, dir, 1<<30)
	err := d.Put(testKey, seq(10, 0), func(w io.Writer) error { w.Write([]byte("half")); return io.ErrShortWrite })
	if err == nil {
		t.Fatal("the encoder's error was not returned")
	}
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Errorf("left behind: %v", des)
	}
}

// FuzzDiskEntry: whatever an entry file holds, reading it returns a hit
// with the exact payload or a miss, never a panic, and a miss removes it.
func FuzzDiskEntry(f *testing.F) {
	ids := seq(40, 3)
	dir := f.TempDir()
	d, err := OpenDisk(DiskOptions{Dir: dir, Budget: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	if err := d.Put(testKey, ids, encoderOf([]byte("snapshot bytes"))); err != nil {
		f.Fatal(err)
	}
	d.Close()
	name := fileName(testKey, len(ids), prefixHash(ids))
	valid, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:headerSize])
	f.Add(valid[:len(valid)-3])
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := OpenDisk(DiskOptions{Dir: dir, Budget: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		n, got := get(d, testKey, ids)
		if n > 0 && !bytes.Equal(got, []byte("snapshot bytes")) {
			t.Fatalf("hit with payload %q", got)
		}
		// Read the same bytes through load directly too, past the
		// directory scan's checks.
		if h, err := parseHeader(b); err == nil && int(h.tokens) <= len(ids) {
			os.WriteFile(filepath.Join(dir, name), b, 0o644)
			d.load(&diskEntry{name: name, h: h}, ids[:h.tokens], func(r io.Reader) error {
				_, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20))
				return err
			})
		}
	})
}
