package promptcache

import (
	"errors"
	"fmt"
	"io"
	"math"
	"syscall"
)

// space is the room a write has on the filesystem, taken when it starts.
type space struct {
	known  bool  // the filesystem's free space could be read
	avail  int64 // free bytes then
	margin int64 // FreeMargin of the filesystem
	// free is what the write may still take before the margin: avail −
	// margin, plus what evictions freed since (huge when unknown).
	free int64
}

func (d *Disk) spaceNow() space {
	avail, total, err := d.freeSpace(d.dir)
	if err != nil {
		if !d.freeErrLogged.Swap(true) {
			d.log("prompt cache: %s: its free space cannot be read (%v); only --prompt-cache-disk-budget bounds the cache", d.dir, err)
		}
		return space{free: math.MaxInt64 / 4}
	}
	m := FreeMargin(total)
	return space{known: true, avail: avail, margin: m, free: avail - m}
}

// noRoomError says an entry does not fit: it needed more than limit bytes,
// the most the cache may hold (the budget, or its entries plus the free
// space above the margin, whichever is less).
type noRoomError struct {
	need, limit int64
	budget      int64
	sp          space
}

func (e *noRoomError) Error() string {
	if !e.sp.known || e.limit == e.budget {
		return fmt.Sprintf("the entry needs more than the %s budget (--prompt-cache-disk-budget)", size(e.budget))
	}
	return fmt.Sprintf("the entry needs more than the %s the cache may use: the filesystem has %s free, of which %s is kept free (5 %% of its size, 1–10 GiB)",
		size(max(e.limit, 0)), size(e.sp.avail), size(e.sp.margin))
}

// size renders n bytes as the server's other lines do ("8 GiB", "1.69
// MiB", "512 B"); this package stays free of the runtime's packages.
func size(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	u, i := int64(1), 0
	for i < len(units)-1 && n >= u<<10 {
		u, i = u<<10, i+1
	}
	if n%u == 0 {
		return fmt.Sprintf("%d %s", n/u, units[i])
	}
	return fmt.Sprintf("%.2f %s", float64(n)/float64(u), units[i])
}

// tooLargeMark: under a key, an entry of tokens tokens did not fit in
// limit bytes.
type tooLargeMark struct {
	tokens int
	limit  int64
}

// limitLocked is the most one entry may take: the budget, or the cache's
// entries plus the free space above the margin, whichever is less.
func (d *Disk) limitLocked(sp space) int64 { return min(d.budget, d.used+sp.free) }

// checkRoom refuses, before anything is written, an entry that cannot
// fit: there is no room at all, or an entry of as many tokens or fewer
// under the same key did not fit in as much room.
func (d *Disk) checkRoom(job writeJob, sp space) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	limit := d.limitLocked(sp)
	if limit < headerSize {
		d.stats.NoRoom++
		if !d.noRoomLogged {
			d.noRoomLogged = true
			d.log("prompt cache: %s: nothing is written until there is room: %v", d.dir, &noRoomError{need: headerSize, limit: limit, budget: d.budget, sp: sp})
		}
		return &noRoomError{need: headerSize, limit: limit, budget: d.budget, sp: sp}
	}
	d.noRoomLogged = false
	if m, ok := d.tooLarge[job.key]; ok && len(job.ids) >= m.tokens && limit <= m.limit {
		d.stats.NoRoom++
		return &noRoomError{need: limit + 1, limit: limit, budget: d.budget, sp: sp}
	}
	return nil
}

// noteTooLarge counts an entry abandoned for want of room and, the first
// time entries this long under its key do not fit this much room, says so.
func (d *Disk) noteTooLarge(job writeJob, e *noRoomError) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.NoRoom++
	m, ok := d.tooLarge[job.key]
	if ok && len(job.ids) >= m.tokens && e.limit <= m.limit {
		return
	}
	d.tooLarge[job.key] = tooLargeMark{tokens: len(job.ids), limit: e.limit}
	d.log("prompt cache: %s: a %d-token entry is not written: %v; entries this long are skipped until there is more room", d.dir, len(job.ids), e)
}

// makeRoom lets a write grow to need bytes: it fails when the entry
// exceeds the budget, or the free space above the margin with every
// other entry gone; otherwise it evicts least recently used entries until
// the filesystem keeps its margin. (The budget is restored once the entry
// is in place: added evicts.)
func (d *Disk) makeRoom(need int64, sp *space) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if limit := d.limitLocked(*sp); need > limit {
		return &noRoomError{need: need, limit: limit, budget: d.budget, sp: *sp}
	}
	for need > sp.free && len(d.entries) > 0 {
		sp.free += d.evictOldestLocked("", "least recently used, making room for a new entry above the free-space margin")
	}
	if need > sp.free {
		return &noRoomError{need: need, limit: d.limitLocked(*sp), budget: d.budget, sp: *sp}
	}
	return nil
}

// roomWriter writes an entry's bytes, making room for each write first.
type roomWriter struct {
	d  *Disk
	w  io.Writer
	sp *space
	n  int64
}

func (r *roomWriter) Write(b []byte) (int, error) {
	if err := r.d.makeRoom(r.n+int64(len(b)), r.sp); err != nil {
		return 0, err
	}
	n, err := r.w.Write(b)
	r.n += int64(n)
	return n, err
}

// isNoSpace says err is the filesystem (or the user's quota) being full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// evictForSpace answers a full filesystem: the entry that hit it is not
// retried, and the least recently used entries holding at least the bytes
// it had written (one at least) are removed, so the filesystem gets room
// back and the next entry has a chance.
func (d *Disk) evictForSpace(written int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var freed int64
	n := 0
	for (freed < written || n == 0) && len(d.entries) > 0 {
		freed += d.evictOldestLocked("", "least recently used, the filesystem is full")
		n++
	}
	if n == 0 {
		d.log("prompt cache: %s: the filesystem is full; the entry was not written (the cache holds no entry to remove)", d.dir)
		return
	}
	d.log("prompt cache: %s: the filesystem is full; the entry was not written and %d older entries (%s) were removed", d.dir, n, size(freed))
}

// fitFreeSpaceLocked evicts least recently used entries while the
// filesystem has less than the margin free (another program filled it).
func (d *Disk) fitFreeSpaceLocked() {
	sp := d.spaceNow()
	if !sp.known || sp.free >= 0 {
		return
	}
	n := 0
	for sp.free < 0 && len(d.entries) > 0 {
		sp.free += d.evictOldestLocked("", "least recently used, the filesystem has less than the free-space margin free")
		n++
	}
	if n > 0 {
		d.log("prompt cache: %s: the filesystem had %s free, less than the %s kept free; removed %d entries", d.dir, size(sp.avail), size(sp.margin), n)
	}
}
