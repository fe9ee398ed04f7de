package expertcache

import (
	"time"

	"github.com/nvmai/nvmai/pkg/runtime/moe"
)

// A visit that asks for more experts than there are unpinned slots (a long
// prefill pass wants nearly every expert of a layer) cannot be served in
// one batch. Cut into batches (visitOrder), the first batch is the resident
// experts, computed while the disk idles, and each later batch's reads
// start only once the batch before it has been computed. visitRolling
// instead keeps the disk busy for the whole visit: every slot freed — a
// resident expert computed, a missing one read and computed — at once takes
// the read of the next missing expert. Each expert is still read at most
// once per visit, and handed over exactly once.

// visitRolling serves a visit of ids too large for the unpinned slots,
// calling fn with one expert at a time: the resident ones first, then each
// missing one as its read lands.
func (c *Cache) visitRolling(lc *layerCache, ids []int, fn func([]int, []moe.ExpertMats) error) error {
	c.drainSpec() // a guess still being read would pin a slot the visit counts on
	for s := range c.loading {
		c.loading[s] = -1
	}
	slotOf := make([]int, len(ids))
	var residents, misses []int // indices into ids
	c.mu.Lock()
	for i, e := range ids {
		slotOf[i] = -1
		if lc.res.where[e] >= 0 {
			residents = append(residents, i)
		} else {
			misses = append(misses, i)
		}
	}
	c.mu.Unlock()
	for _, i := range residents { // hits: never out of room
		if _, err := c.placeBatch(lc, ids[i:i+1], slotOf[i:i+1]); err != nil {
			c.unpinAll(lc, pinned(slotOf))
			return err
		}
	}
	r := rolling{c: c, lc: lc, ids: ids, slotOf: slotOf, misses: misses, start: time.Now()}
	defer r.finish()
	r.issue()
	for _, i := range residents {
		r.call(i, fn)
		r.issue()
	}
	for r.inflight > 0 {
		d := c.await()
		r.inflight--
		r.lastEnd = later(r.lastEnd, d.end)
		i := c.loading[d.slot]
		err := c.landed(lc, d, ids) // names the expert by c.loading
		c.loading[d.slot] = -1
		if err != nil {
			r.fail(err)
			r.release(i)
			continue
		}
		r.call(i, fn)
		r.issue()
	}
	c.addReadTime(r.start, r.lastEnd, r.reads)
	return r.err
}

// rolling is the state of one visitRolling.
type rolling struct {
	c           *Cache
	lc          *layerCache
	ids, slotOf []int
	misses      []int // indices into ids still to read, from next on
	next        int
	inflight    int
	reads       int
	start       time.Time
	lastEnd     time.Time
	err         error
	groupIdx    [1]int
	groupMats   [1]moe.ExpertMats
}

// issue starts the reads of the next missing experts while unpinned slots
// remain (none after an error).
func (r *rolling) issue() {
	for r.next < len(r.misses) && r.err == nil {
		r.c.mu.Lock()
		room := r.lc.res.free() > 0
		r.c.mu.Unlock()
		if !room {
			return
		}
		i := r.misses[r.next]
		r.next++
		if _, err := r.c.placeBatch(r.lc, r.ids[i:i+1], r.slotOf[i:i+1]); err != nil {
			r.fail(err)
			return
		}
		s := r.slotOf[i]
		r.c.loading[s] = i
		r.c.reqs <- r.c.readOf(r.lc, s, r.ids[i]) // never blocks: at most one read per slot
		r.inflight++
		r.reads++
	}
}

// call hands expert i over (unless an error stopped the visit) and
// releases its slot.
func (r *rolling) call(i int, fn func([]int, []moe.ExpertMats) error) {
	if r.err == nil {
		r.groupIdx[0], r.groupMats[0] = i, r.lc.views[r.slotOf[i]]
		r.fail(fn(r.groupIdx[:], r.groupMats[:]))
	}
	r.release(i)
}

func (r *rolling) release(i int) {
	r.c.mu.Lock()
	r.lc.res.unpin(r.slotOf[i])
	r.c.mu.Unlock()
	r.slotOf[i] = -1
}

func (r *rolling) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// finish waits for every read still in flight (also when fn panicked:
// reads still write into their slots) and unpins what is still pinned.
func (r *rolling) finish() {
	for ; r.inflight > 0; r.inflight-- {
		d := r.c.await()
		r.c.landed(r.lc, d, r.ids) // a failed read empties its slot
	}
	r.c.unpinAll(r.lc, pinned(r.slotOf))
}

// pinned lists the slots of slotOf that are still pinned (not −1).
func pinned(slotOf []int) []int {
	var out []int
	for _, s := range slotOf {
		if s >= 0 {
			out = append(out, s)
		}
	}
	return out
}
