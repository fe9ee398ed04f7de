package promptcache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Disk keeps prompt-cache entries as files in one directory, within a byte
// budget, evicting the least recently used (the file's mtime, so the order
// survives a restart). It deletes only files it recognises as its own: an
// entry or temporary name (entryName, tempName) whose header starts with
// the entry magic. It is safe for concurrent use.
type Disk struct {
	dir       string
	budget    int64
	log       func(format string, args ...any)
	now       func() time.Time
	freeSpace FreeSpaceFunc
	// create opens a new temporary entry file (a test injects failures).
	create func(path string) (entryFile, error)

	mu      sync.Mutex
	entries map[string]*diskEntry // by file name
	used    int64
	pending map[string]bool // names queued or being written
	stats   DiskStats
	// tooLarge remembers, per key, the fewest tokens of an entry that did
	// not fit and the room it had: a longer entry under that key holds
	// more state, so it is not tried until there is more room.
	tooLarge      map[Key]tooLargeMark
	noRoomLogged  bool        // "no room at all" was logged and still holds
	freeErrLogged atomic.Bool // the free space could not be read (logged once)

	queue   chan writeJob
	wg      sync.WaitGroup // queued jobs not yet done
	done    chan struct{}  // closed when the writer exits
	closeMu sync.RWMutex
	closed  bool
}

type diskEntry struct {
	name    string
	h       header
	size    int64
	lastUse time.Time
}

// DiskStats counts what the disk cache did.
type DiskStats struct {
	Dir         string `json:"dir"`
	Entries     int    `json:"entries"`
	Bytes       int64  `json:"bytes"`
	Budget      int64  `json:"budget"`
	Hits        int64  `json:"hits"`
	Misses      int64  `json:"misses"`
	Writes      int64  `json:"writes"`
	WriteErrors int64  `json:"write_errors"`
	Dropped     int64  `json:"dropped"` // writes skipped because the queue was full
	Evictions   int64  `json:"evictions"`
	Corrupt     int64  `json:"corrupt"` // entries found damaged and removed
	NoRoom      int64  `json:"no_room"` // entries not written: larger than the budget or the free space allows
}

// DiskOptions configures OpenDisk.
type DiskOptions struct {
	Dir    string
	Budget int64 // bytes of entry files kept; must be > 0
	// Queue is how many writes may wait for the background writer
	// (default 2); Enqueue drops a write beyond it.
	Queue int
	// Log receives one line per notable event (corrupt entry removed,
	// write failed, foreign file left alone); nil discards them.
	Log func(format string, args ...any)
	// FreeSpace reports the directory's free space (nil: statfs). The
	// cache never lets it fall below FreeMargin of the filesystem.
	FreeSpace FreeSpaceFunc
}

// staleTemp is the age after which a temporary file left in the
// directory is taken for one a crashed writer abandoned.
const staleTemp = time.Hour

// OpenDisk opens (creating it if needed) the cache directory and indexes
// the entries there from their headers alone, removing damaged entries of
// its own and abandoned temporary files, and evicting down to the budget.
func OpenDisk(opt DiskOptions) (*Disk, error) {
	if opt.Budget <= 0 {
		return nil, fmt.Errorf("prompt cache %s: the disk budget must be positive", opt.Dir)
	}
	if opt.Queue <= 0 {
		opt.Queue = 2
	}
	if opt.Log == nil {
		opt.Log = func(string, ...any) {}
	}
	if opt.FreeSpace == nil {
		opt.FreeSpace = statfsFreeSpace
	}
	if err := checkCacheDir(opt.Dir); err != nil {
		return nil, err
	}
	// 0700: entries hold whole conversations (token ids, system prompts
	// included), which other users of the machine must not read.
	if err := os.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("prompt cache: %w", err)
	}
	if fi, err := os.Stat(opt.Dir); err != nil {
		return nil, fmt.Errorf("prompt cache: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("prompt cache: %s is not a directory; give a directory (created if missing)", opt.Dir)
	}
	d := &Disk{
		dir: opt.Dir, budget: opt.Budget, log: opt.Log, now: time.Now, freeSpace: opt.FreeSpace, create: createEntryFile,
		entries: map[string]*diskEntry{}, pending: map[string]bool{}, tooLarge: map[Key]tooLargeMark{},
		queue: make(chan writeJob, opt.Queue), done: make(chan struct{}),
	}
	onlyOurs, err := d.scan()
	if err != nil {
		return nil, err
	}
	d.tightenDir(onlyOurs)
	d.mu.Lock()
	d.evictLocked("")
	d.fitFreeSpaceLocked()
	d.mu.Unlock()
	go d.writer()
	return d, nil
}

// scan indexes the directory; onlyOurs says it holds nothing but the
// cache's own files.
func (d *Disk) scan() (onlyOurs bool, err error) {
	des, err := os.ReadDir(d.dir)
	if err != nil {
		return false, fmt.Errorf("prompt cache: %w", err)
	}
	onlyOurs = true
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() || !entryName.MatchString(name) && !tempName.MatchString(name) {
			onlyOurs = false
		}
		switch {
		case !de.Type().IsRegular():
		case entryName.MatchString(name):
			d.indexFile(name)
		case tempName.MatchString(name):
			if info, err := de.Info(); err == nil && d.now().Sub(info.ModTime()) > staleTemp {
				d.removeOurs(name, "an abandoned temporary file")
			}
		}
	}
	return onlyOurs, nil
}

// tightenDir makes a directory that other users can enter or list
// private (0700) when this user owns it and it holds only the cache's
// files; otherwise it says so and leaves it alone. The entries are 0600
// either way, so their contents stay private.
func (d *Disk) tightenDir(onlyOurs bool) {
	fi, err := os.Stat(d.dir)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	owned, known := ownedByMe(fi)
	if !known {
		return
	}
	mode := fi.Mode().Perm()
	if owned && onlyOurs {
		if err := os.Chmod(d.dir, mode&^0o077); err == nil {
			d.log("prompt cache: %s was open to other users (mode %#o); made it %#o", d.dir, mode, mode&^0o077)
			return
		}
	}
	d.log("prompt cache: %s is open to other users (mode %#o), who can see the entries' names and sizes (not their contents: entries are 0600); `chmod 700 %s` or use a private directory", d.dir, mode, d.dir)
}

func (d *Disk) indexFile(name string) {
	p := filepath.Join(d.dir, name)
	f, err := os.Open(p)
	if err != nil {
		d.log("prompt cache: %s: %v; skipped", p, err)
		return
	}
	defer f.Close()
	buf := make([]byte, headerSize)
	n, _ := io.ReadFull(f, buf)
	h, err := parseHeader(buf[:n])
	if errors.Is(err, errNotOurs) {
		d.log("prompt cache: %s has an entry's name but not its magic; left alone", p)
		return
	}
	info, serr := f.Stat()
	if err == nil && serr == nil && info.Size() != headerSize+int64(h.zstdLen) {
		err = fmt.Errorf("%d bytes, the header says %d", info.Size(), headerSize+int64(h.zstdLen))
	}
	if err == nil && fileName(h.key, int(h.tokens), h.prefix) != name {
		err = errors.New("its name does not match its header")
	}
	if err != nil || serr != nil {
		d.stats.Corrupt++
		d.removeOurs(name, fmt.Sprintf("a damaged entry (%v)", errors.Join(err, serr)))
		return
	}
	if info.Mode().Perm()&0o077 != 0 {
		// Written by an older version (0644): other users could read it.
		if err := f.Chmod(0o600); err != nil {
			d.log("prompt cache: %s is readable by other users and could not be made private: %v", p, err)
		}
	}
	d.entries[name] = &diskEntry{name: name, h: h, size: info.Size(), lastUse: info.ModTime()}
	d.used += info.Size()
}

// removeOurs deletes name after checking that it still starts with the
// entry magic; anything else is left alone.
func (d *Disk) removeOurs(name, why string) {
	p := filepath.Join(d.dir, name)
	f, err := os.Open(p)
	if err != nil {
		return
	}
	var magic [8]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err != nil || magic != entryMagic {
		d.log("prompt cache: %s is not a cache file any more; left alone", p)
		return
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log("prompt cache: removing %s: %v", p, err)
		return
	}
	d.log("prompt cache: removed %s: %s", p, why)
}

// Get finds the longest entry under key longer than longerThan tokens
// whose tokens are a prefix of ids, verifies it and hands its payload (after the token ids) to decode; n is
// its token count. A damaged entry (bad checksum, truncated, decode error)
// is removed and logged, and the next shorter one tried. The value decode
// built must be dropped unless ok: the checksum is checked after decode
// has read the whole payload.
func (d *Disk) Get(key Key, ids []int, longerThan int, decode func(io.Reader) error) (n int, ok bool) {
	for _, e := range d.candidates(key, ids, longerThan) {
		err := d.load(e, ids[:e.h.tokens], decode)
		if err == nil {
			d.touch(e)
			d.mu.Lock()
			d.stats.Hits++
			d.mu.Unlock()
			return int(e.h.tokens), true
		}
		d.drop(e, err)
	}
	d.mu.Lock()
	d.stats.Misses++
	d.mu.Unlock()
	return 0, false
}

// candidates are key's entries that are prefixes of ids by their
// recorded hash, longest first.
func (d *Disk) candidates(key Key, ids []int, longerThan int) []*diskEntry {
	d.mu.Lock()
	var es []*diskEntry
	for _, e := range d.entries {
		if n := int(e.h.tokens); e.h.key == key && n <= len(ids) && n > longerThan {
			es = append(es, e)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(es, func(a, b *diskEntry) int { return int(b.h.tokens) - int(a.h.tokens) })
	hashes := map[uint32][32]byte{}
	var out []*diskEntry
	for _, e := range es {
		h, ok := hashes[e.h.tokens]
		if !ok {
			h = prefixHash(ids[:e.h.tokens])
			hashes[e.h.tokens] = h
		}
		if h == e.h.prefix {
			out = append(out, e)
		}
	}
	return out
}

func (d *Disk) touch(e *diskEntry) {
	now := d.now()
	d.mu.Lock()
	e.lastUse = now
	d.mu.Unlock()
	if err := os.Chtimes(filepath.Join(d.dir, e.name), now, now); err != nil {
		d.log("prompt cache: %v", err)
	}
}

// drop forgets an entry that failed to load, removing the file unless it
// was already gone.
func (d *Disk) drop(e *diskEntry, err error) {
	d.mu.Lock()
	if d.entries[e.name] == e {
		delete(d.entries, e.name)
		d.used -= e.size
	}
	gone := errors.Is(err, fs.ErrNotExist)
	if !gone {
		d.stats.Corrupt++
	}
	d.mu.Unlock()
	if !gone {
		d.removeOurs(e.name, fmt.Sprintf("unusable (%v); the prompt is computed again", err))
	}
}

// load reads and verifies one entry against the header it was indexed by.
func (d *Disk) load(e *diskEntry, ids []int, decode func(io.Reader) error) error {
	f, err := os.Open(filepath.Join(d.dir, e.name))
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, headerSize)
	if _, err := io.ReadFull(f, buf); err != nil {
		return fmt.Errorf("reading the header: %w", err)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return err
	}
	if h != e.h {
		return errors.New("the header changed since the directory was indexed")
	}
	if info, err := f.Stat(); err != nil || info.Size() != headerSize+int64(h.zstdLen) {
		return fmt.Errorf("the file is not the %d bytes its header says (truncated?)", headerSize+int64(h.zstdLen))
	}
	zr, err := zstd.NewReader(bufio.NewReaderSize(io.LimitReader(f, int64(h.zstdLen)), 1<<20),
		zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderLowmem(true))
	if err != nil {
		return err
	}
	defer zr.Close()
	pr := &payloadReader{r: io.LimitReader(zr, int64(h.payloadLen)), h: sha256.New()}
	if err := checkIDs(pr, ids); err != nil {
		return err
	}
	if err := decode(pr); err != nil {
		return fmt.Errorf("decoding the snapshot: %w", err)
	}
	if _, err := io.Copy(io.Discard, pr); err != nil {
		return fmt.Errorf("reading the payload: %w", err)
	}
	if pr.n != int64(h.payloadLen) {
		return fmt.Errorf("the payload has %d bytes, the header says %d (truncated?)", pr.n, h.payloadLen)
	}
	if n, err := zr.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("data after the payload's %d bytes (%v)", h.payloadLen, err)
	}
	if sum := pr.h.Sum(nil); !bytes.Equal(sum, h.payloadSum[:]) {
		return fmt.Errorf("payload sha256 %x, recorded %x", sum, h.payloadSum)
	}
	return nil
}

// checkIDs compares the entry's stored token ids with the prompt's.
func checkIDs(r io.Reader, ids []int) error {
	buf := make([]byte, 4*min(len(ids), 4096))
	for at := 0; at < len(ids); {
		k := min(len(ids)-at, len(buf)/4)
		if _, err := io.ReadFull(r, buf[:4*k]); err != nil {
			return fmt.Errorf("reading the token ids: %w", err)
		}
		for i := range k {
			if got := binary.LittleEndian.Uint32(buf[4*i:]); got != uint32(ids[at+i]) {
				return fmt.Errorf("token %d is %d in the entry, %d in the prompt", at+i, got, ids[at+i])
			}
		}
		at += k
	}
	return nil
}

// payloadReader hashes and counts what is read through it.
type payloadReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (p *payloadReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.h.Write(b[:n])
	p.n += int64(n)
	return n, err
}

// Logf writes a line to the cache's log (DiskOptions.Log).
func (d *Disk) Logf(format string, args ...any) { d.log(format, args...) }

// Stats reports the directory's contents and counters.
func (d *Disk) Stats() DiskStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Dir, s.Entries, s.Bytes, s.Budget = d.dir, len(d.entries), d.used, d.budget
	return s
}

// evictLocked removes least recently used entries until the directory is
// within budget; keep (a name just written) goes last.
func (d *Disk) evictLocked(keep string) {
	for d.used > d.budget && len(d.entries) > 0 {
		d.evictOldestLocked(keep, "least recently used, over the budget")
	}
}

// evictOldestLocked removes the least recently used entry (keep last) and
// returns its size.
func (d *Disk) evictOldestLocked(keep, why string) int64 {
	var oldest *diskEntry
	for _, e := range d.entries {
		if oldest == nil || (oldest.name == keep) || (e.name != keep && e.lastUse.Before(oldest.lastUse)) {
			oldest = e
		}
	}
	delete(d.entries, oldest.name)
	d.used -= oldest.size
	d.stats.Evictions++
	d.removeOurs(oldest.name, why)
	return oldest.size
}
