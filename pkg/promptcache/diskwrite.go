package promptcache

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// maxWindow is the zstd window the writer uses and the most the reader
// accepts, so a hostile frame cannot make the decoder reserve more.
const maxWindow = 8 << 20

type writeJob struct {
	key    Key
	ids    []int
	encode func(io.Writer) error
	name   string
	prefix [32]byte
}

// Enqueue schedules an entry for ids under key, written in the background
// by encode (which must only read state that no longer changes, such as a
// snapshot). It never blocks: when the entry exists (it is then marked
// used), is already queued, or the queue is full (counted as dropped), or
// the cache is closed, nothing is written and Enqueue reports false.
func (d *Disk) Enqueue(key Key, ids []int, encode func(io.Writer) error) bool {
	if len(ids) == 0 {
		return false
	}
	prefix := prefixHash(ids)
	name := fileName(key, len(ids), prefix)
	d.closeMu.RLock()
	defer d.closeMu.RUnlock()
	if d.closed {
		return false
	}
	d.mu.Lock()
	if e := d.entries[name]; e != nil {
		d.mu.Unlock()
		d.touch(e)
		return false
	}
	if d.pending[name] {
		d.mu.Unlock()
		return false
	}
	d.pending[name] = true
	d.wg.Add(1)
	job := writeJob{key: key, ids: append([]int(nil), ids...), encode: encode, name: name, prefix: prefix}
	select {
	case d.queue <- job:
		d.mu.Unlock()
		return true
	default:
		delete(d.pending, name)
		d.stats.Dropped++
		d.wg.Done()
		d.mu.Unlock()
		return false
	}
}

// Flush waits until every queued write is done.
func (d *Disk) Flush() { d.wg.Wait() }

// Close finishes the queued writes and stops the writer. A nil Disk is
// closed already.
func (d *Disk) Close() {
	if d == nil {
		return
	}
	d.closeMu.Lock()
	if d.closed {
		d.closeMu.Unlock()
		return
	}
	d.closed = true
	close(d.queue)
	d.closeMu.Unlock()
	<-d.done
}

func (d *Disk) writer() {
	defer close(d.done)
	for job := range d.queue {
		err := d.write(job)
		var noRoom *noRoomError
		failed := err != nil && !errors.As(err, &noRoom) // noRoom is counted and logged where it is found
		d.mu.Lock()
		delete(d.pending, job.name)
		if failed {
			d.stats.WriteErrors++
		}
		d.mu.Unlock()
		if failed {
			d.log("prompt cache: writing the %d-token entry %s: %v", len(job.ids), job.name, err)
		}
		d.wg.Done()
	}
}

// Put writes an entry now (Enqueue's work, in the caller's goroutine).
func (d *Disk) Put(key Key, ids []int, encode func(io.Writer) error) error {
	prefix := prefixHash(ids)
	return d.write(writeJob{key: key, ids: ids, encode: encode, name: fileName(key, len(ids), prefix), prefix: prefix})
}

var tempSeq atomic.Uint64

// entryFile is a temporary entry file being written.
type entryFile interface {
	io.Writer
	io.WriterAt
	Sync() error
	Close() error
}

// createEntryFile creates a temporary entry file, 0600: an entry holds a
// whole conversation.
func createEntryFile(path string) (entryFile, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

// write streams the entry to a temporary file in the directory, fsyncs
// it, renames it into place and fsyncs the directory, then evicts down to
// the budget. While it writes it keeps the filesystem's free space above
// the margin, evicting the least recently used entries as the file grows;
// an entry that fits neither the budget nor the free space with every
// other entry gone is abandoned (noRoomError). On any failure the
// temporary file is removed; a full filesystem (ENOSPC, EDQUOT) also
// evicts entries for the next write. A failed entry is never retried.
func (d *Disk) write(job writeJob) (err error) {
	sp := d.spaceNow()
	if err := d.checkRoom(job, sp); err != nil {
		return err
	}
	final := filepath.Join(d.dir, job.name)
	tmp := filepath.Join(d.dir, fmt.Sprintf(".%s.%d%d.tmp", strings.TrimSuffix(job.name, ".nvpc"), os.Getpid(), tempSeq.Add(1)))
	f, err := d.create(tmp)
	if err != nil {
		if isNoSpace(err) {
			d.evictForSpace(0)
		}
		return err
	}
	rw := &roomWriter{d: d, w: f, sp: &sp}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			var noRoom *noRoomError
			switch {
			case errors.As(err, &noRoom):
				d.noteTooLarge(job, noRoom)
			case isNoSpace(err):
				d.evictForSpace(rw.n)
			}
		}
	}()
	h := header{key: job.key, tokens: uint32(len(job.ids)), prefix: job.prefix}
	// A placeholder whose checksum cannot match until the real header is
	// written last, so a crash leaves a file no reader accepts.
	if _, err = rw.Write(append(entryMagic[:], make([]byte, headerSize-len(entryMagic))...)); err != nil {
		return err
	}
	if h.payloadLen, h.zstdLen, h.payloadSum, err = writePayload(rw, job); err != nil {
		return err
	}
	if _, err = f.WriteAt(h.marshal(), 0); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, final); err != nil {
		return err
	}
	syncDir(d.dir)
	d.added(job.name, h, headerSize+int64(h.zstdLen))
	return nil
}

// writePayload compresses the ids and the encoder's bytes after the
// header, returning the payload's length, the frame's length and the
// payload's sha256.
func writePayload(f io.Writer, job writeJob) (payloadLen, zstdLen uint64, sum [32]byte, err error) {
	cw := &countWriter{w: bufio.NewWriterSize(f, 1<<20)}
	zw, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(maxWindow))
	if err != nil {
		return 0, 0, sum, err
	}
	hs := sha256.New()
	pw := &countWriter{w: io.MultiWriter(zw, hs)}
	bw := bufio.NewWriterSize(pw, 256<<10)
	var b [4]byte
	for _, id := range job.ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		bw.Write(b[:])
	}
	err = job.encode(bw)
	err = errors.Join(err, bw.Flush(), zw.Close(), cw.w.(*bufio.Writer).Flush())
	if err != nil {
		return 0, 0, sum, err
	}
	hs.Sum(sum[:0])
	return uint64(pw.n), uint64(cw.n), sum, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
}

// added indexes a new file and evicts down to the budget, the new entry
// last (alone over the budget, it goes too).
func (d *Disk) added(name string, h header, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.entries[name]; old != nil {
		d.used -= old.size
	}
	d.entries[name] = &diskEntry{name: name, h: h, size: size, lastUse: d.now()}
	d.used += size
	d.stats.Writes++
	d.evictLocked(name)
}
