package expertcache

import (
	"errors"
	"fmt"
	"time"

	"github.com/nvmai/nvmai/pkg/model"
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
//
// Speculative reads (warm reads from the layer before, decode's Prefetch)
// may still be in flight when the visit starts: one for an expert the visit
// asks for is awaited like a demand read (and read again on demand if it
// failed or was skipped); the others are accounted for as they land, each
// freeing its slot for the visit's misses.

// visitRolling serves a visit of ids too large for the unpinned slots,
// calling fn with one expert at a time: the resident ones first, then each
// missing one (or awaited guess) as its read lands.
func (c *Cache) visitRolling(lc *layerCache, ids []int, fn func([]int, []model.ExpertMats) error) error {
	for s := range c.loading {
		c.loading[s] = -1
	}
	slotOf := make([]int, len(ids))
	var residents, guesses, misses []int // indices into ids
	c.mu.Lock()
	for i, e := range ids {
		slotOf[i] = -1
		switch s := lc.res.where[e]; {
		case s >= 0 && lc.spec[s]:
			guesses = append(guesses, i)
		case s >= 0:
			residents = append(residents, i)
		default:
			misses = append(misses, i)
		}
	}
	c.mu.Unlock()
	r := rolling{c: c, lc: lc, ids: ids, slotOf: slotOf, misses: misses, start: time.Now()}
	defer r.finish()
	for _, set := range [][]int{residents, guesses} { // hits: never out of room
		for _, i := range set {
			if _, err := c.placeBatch(lc, ids[i:i+1], slotOf[i:i+1]); err != nil {
				return err
			}
		}
	}
	for _, i := range guesses {
		c.loading[slotOf[i]] = i
		r.inflight++
	}
	r.issue()
	for _, i := range residents {
		r.call(i, fn)
		r.issue()
	}
	for r.inflight > 0 || r.pending() {
		if r.inflight == 0 && c.specOut == 0 {
			// Nothing in flight can free a slot: only unreleased
			// acquisitions pin them (Visit checked that one is free).
			r.fail(fmt.Errorf("expert cache: layer %d: %w", lc.index, errors.New("every slot is pinned by unreleased acquisitions; release them before Visit")))
			break
		}
		d := c.await()
		var i int
		if d.spec {
			if !c.specLanded(lc, d) { // another layer's guess, or one not asked for
				r.issue()
				continue
			}
			i = c.loading[d.slot]
			if d.canceled || d.err != nil {
				c.readAgain(lc, d, ids[i]) // still in flight, now on demand
				r.reads++
				continue
			}
		} else {
			r.lastEnd = later(r.lastEnd, d.end)
			i = c.loading[d.slot]
			if err := c.landed(lc, d, ids); err != nil { // names the expert by c.loading
				r.inflight--
				c.loading[d.slot] = -1
				r.fail(err)
				r.release(i)
				continue
			}
		}
		r.inflight--
		c.loading[d.slot] = -1
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
	inflight    int // reads the visit waits for: its misses and awaited guesses
	reads       int
	start       time.Time
	lastEnd     time.Time
	err         error
	warmed      bool
	groupIdx    [1]int
	groupMats   [1]model.ExpertMats
}

// pending reports whether misses remain to be read (none after an error).
func (r *rolling) pending() bool { return r.next < len(r.misses) && r.err == nil }

// issue starts the reads of the next missing experts while unpinned slots
// remain (none after an error). Once the last is issued, the next layer's
// warm reads are queued behind them (warm.go).
func (r *rolling) issue() {
	for r.pending() {
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
	if !r.warmed && r.err == nil {
		r.warmed = true
		r.c.warmAfter(r.lc, len(r.ids))
	}
}

// call hands expert i over (unless an error stopped the visit) and
// releases its slot.
func (r *rolling) call(i int, fn func([]int, []model.ExpertMats) error) {
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

// finish waits for every read the visit still waits for (also when fn
// panicked: reads still write into their slots) and unpins what is still
// pinned. An awaited guess that failed or was skipped is emptied, not read
// again.
func (r *rolling) finish() {
	c := r.c
	for r.inflight > 0 {
		d := c.await()
		if d.spec {
			if !c.specLanded(r.lc, d) {
				continue
			}
			if d.canceled || d.err != nil {
				c.mu.Lock()
				r.lc.res.forget(d.slot)
				r.lc.warmed[d.slot], r.lc.prefetched[d.slot] = false, false
				c.mu.Unlock()
			}
		} else {
			c.landed(r.lc, d, r.ids) // a failed read empties its slot
		}
		c.loading[d.slot] = -1
		r.inflight--
	}
	c.unpinAll(r.lc, pinned(r.slotOf))
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
