package expertstream

import (
	"math"
	"slices"
)

// SlotRef is a streamed layer's slot bookkeeping as kernels.cu's
// slot_resolve and slot_prefetch keep it on the device, in Go: the
// reference the GPU test compares the device's tables with, step for step.
//
// Stamps: a use by decode step s stamps its slot 2s, a read-ahead guess for
// step s stamps it 2s−1 (0: never used), so least recently used is the
// lowest stamp, a guess counts as a use half a step before the step it
// guesses for, and a wrong guess ages out like any slot.
type SlotRef struct {
	SlotOf   []int32  // [E] the slot holding expert e, −1 when none
	ExpertOf []int32  // [S] the expert in slot s, −1 when empty
	LastUse  []uint32 // [S] the stamp of slot s's last use, 0 never
	Step     uint32
	Fill     [][2]int32 // the last step's copies: (slot, expert)
	Ahead    [][2]int32 // the last read-ahead's copies: (slot, expert)
	Hits     uint64
	Misses   uint64
	// Read-ahead counters: guesses, picks that were guessed, guesses
	// copied ahead, picks found in a slot copied ahead for them.
	Guesses, Guessed, AheadCopies, AheadUsed uint64
}

// NewSlotRef is an empty table of E experts in S slots.
func NewSlotRef(E, S int) *SlotRef {
	r := &SlotRef{SlotOf: make([]int32, E), ExpertOf: make([]int32, S), LastUse: make([]uint32, S)}
	for i := range r.SlotOf {
		r.SlotOf[i] = -1
	}
	for i := range r.ExpertOf {
		r.ExpertOf[i] = -1
	}
	return r
}

// lru is the least recently used slot not stamped stamp (the lowest index
// among equals, so never-used slots come first, lowest first).
func (r *SlotRef) lru(stamp uint32) int {
	best := -1
	for s, u := range r.LastUse {
		if u == stamp {
			continue
		}
		if best < 0 || u < r.LastUse[best] {
			best = s
		}
	}
	return best
}

// place puts expert e in slot s, evicting its expert, stamped stamp.
func (r *SlotRef) place(e int32, s int, stamp uint32) {
	if old := r.ExpertOf[s]; old >= 0 {
		r.SlotOf[old] = -1
	}
	r.SlotOf[e] = int32(s)
	r.ExpertOf[s] = e
	r.LastUse[s] = stamp
}

// Resolve gives a step's picks (distinct experts, router order) their
// slots: every pick already in a slot (a hit) marks that slot used by this
// step; then each miss, in router order, takes the least recently used
// slot the step has not used, evicting its expert. A hit on a slot this
// step's read-ahead stamped is a guessed pick, and a copy used when the
// read-ahead copied it there. It needs len(sel) ≤ S.
func (r *SlotRef) Resolve(sel []int32) []int32 {
	r.Step++
	stamp := 2 * r.Step
	out := make([]int32, len(sel))
	var missAt []int
	for i, e := range sel {
		if s := r.SlotOf[e]; s >= 0 {
			if r.LastUse[s] == stamp-1 {
				r.Guessed++
				if slices.Contains(r.Ahead, [2]int32{s, e}) {
					r.AheadUsed++
				}
			}
			out[i] = s
			r.LastUse[s] = stamp
			r.Hits++
		} else {
			missAt = append(missAt, i)
		}
	}
	r.Fill = r.Fill[:0]
	for _, i := range missAt {
		best := r.lru(stamp)
		r.place(sel[i], best, stamp)
		out[i] = int32(best)
		r.Fill = append(r.Fill, [2]int32{int32(best), sel[i]})
		r.Misses++
	}
	return out
}

// guessTopK is slot_prefetch's guess: the k experts of the highest logits
// (NaN as −∞, the lower id on ties), in ascending id order.
func guessTopK(logits []float32, k int) []int32 {
	key := func(e int) float32 {
		if v := logits[e]; v == v {
			return v
		}
		return float32(math.Inf(-1))
	}
	var out []int32
	for e := range logits {
		beaten := 0
		for j := range logits {
			if key(j) > key(e) || (key(j) == key(e) && j < e) {
				beaten++
			}
		}
		if beaten < k {
			out = append(out, int32(e))
		}
	}
	return out
}

// Prefetch is the read-ahead before the next step (slot_prefetch): the
// guesses from logits [E], each already in a slot stamped 2s−1 (s the
// next step), then each other, in order, into the least recently used
// slot not stamped 2s−1, evicting its expert; those are the read-ahead
// list. It returns the guesses. The step counter is left as it is.
func (r *SlotRef) Prefetch(logits []float32, k int) []int32 {
	stamp := 2*r.Step + 1
	guesses := guessTopK(logits, k)
	var missAt []int32
	for _, e := range guesses {
		if s := r.SlotOf[e]; s >= 0 {
			r.LastUse[s] = stamp
		} else {
			missAt = append(missAt, e)
		}
	}
	r.Ahead = r.Ahead[:0]
	for _, e := range missAt {
		best := r.lru(stamp)
		r.place(e, best, stamp)
		r.Ahead = append(r.Ahead, [2]int32{int32(best), e})
	}
	r.Guesses += uint64(len(guesses))
	r.AheadCopies += uint64(len(r.Ahead))
	return guesses
}

// Words is the table as the device lays it out (kernels.cu, slot_resolve):
// slotOf, expertOf, lastUse, the step, the fill count and the fill list
// of k entries, the read-ahead count and its list of k entries.
func (r *SlotRef) Words(k int) []int32 {
	w := append([]int32{}, r.SlotOf...)
	w = append(w, r.ExpertOf...)
	for _, u := range r.LastUse {
		w = append(w, int32(u))
	}
	list := func(n int, l [][2]int32) {
		w = append(w, int32(n))
		out := make([]int32, 2*k)
		for j, f := range l {
			out[2*j], out[2*j+1] = f[0], f[1]
		}
		w = append(w, out...)
	}
	w = append(w, int32(r.Step))
	list(len(r.Fill), r.Fill)
	list(len(r.Ahead), r.Ahead)
	return w
}
