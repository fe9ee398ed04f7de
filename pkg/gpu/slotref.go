package gpu

// slotRef is a streamed layer's slot bookkeeping as kernels.cu's
// slot_resolve keeps it on the device, in Go: the reference the GPU test
// compares the device's tables with, step for step.
type slotRef struct {
	slotOf   []int32  // [E] the slot holding expert e, −1 when none
	expertOf []int32  // [S] the expert in slot s, −1 when empty
	lastUse  []uint32 // [S] the step that last used slot s, 0 never
	step     uint32
	fill     [][2]int32 // the last step's copies: (slot, expert)
	hits     uint64
	misses   uint64
}

func newSlotRef(E, S int) *slotRef {
	r := &slotRef{slotOf: make([]int32, E), expertOf: make([]int32, S), lastUse: make([]uint32, S)}
	for i := range r.slotOf {
		r.slotOf[i] = -1
	}
	for i := range r.expertOf {
		r.expertOf[i] = -1
	}
	return r
}

// resolve gives a step's picks (distinct experts, router order) their
// slots: every pick already in a slot (a hit) marks that slot used by this
// step; then each miss, in router order, takes the least recently used
// slot the step has not used (the lowest index among equals, so
// never-used slots come first, lowest first), evicting its expert. It
// needs len(sel) ≤ S.
func (r *slotRef) resolve(sel []int32) []int32 {
	r.step++
	stamp := r.step
	out := make([]int32, len(sel))
	var missAt []int
	for i, e := range sel {
		if s := r.slotOf[e]; s >= 0 {
			out[i] = s
			r.lastUse[s] = stamp
			r.hits++
		} else {
			missAt = append(missAt, i)
		}
	}
	r.fill = r.fill[:0]
	for _, i := range missAt {
		best := -1
		for s, u := range r.lastUse {
			if u == stamp {
				continue
			}
			if best < 0 || u < r.lastUse[best] {
				best = s
			}
		}
		e := sel[i]
		if old := r.expertOf[best]; old >= 0 {
			r.slotOf[old] = -1
		}
		r.slotOf[e] = int32(best)
		r.expertOf[best] = e
		r.lastUse[best] = stamp
		out[i] = int32(best)
		r.fill = append(r.fill, [2]int32{int32(best), e})
		r.misses++
	}
	return out
}

// words is the table as the device lays it out (kernels.cu, slot_resolve):
// slotOf, expertOf, lastUse, the step, the fill count and the fill list
// of k entries.
func (r *slotRef) words(k int) []int32 {
	w := append([]int32{}, r.slotOf...)
	w = append(w, r.expertOf...)
	for _, u := range r.lastUse {
		w = append(w, int32(u))
	}
	w = append(w, int32(r.step), int32(len(r.fill)))
	list := make([]int32, 2*k)
	for j, f := range r.fill {
		list[2*j], list[2*j+1] = f[0], f[1]
	}
	return append(w, list...)
}
