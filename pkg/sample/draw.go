package sample

import (
	"cmp"
	"slices"
)

// The probabilities are computed so that a GPU can compute the very same
// numbers: one portable Exp (exp.go), every sum taken in a fixed order, and
// sums over a row taken in blocks of Block consecutive ids (each block in
// order, then the blocks in order), so a device may take the blocks in
// parallel and still add the same numbers in the same order. Zero weights
// (tokens a filter removed) change no sum, so the host adds only the
// candidates it kept and the device may add the whole row.

// Block is the number of consecutive ids a blocked sum adds in order before
// adding their sum to the running total (kernels.cu's SAMP_BLOCK).
const Block = 512

// weigh sets each candidate's weight: Exp(logit − max), so the largest
// weighs exactly 1.
func weigh(cand []candidate) {
	m := cand[0].logit
	for _, c := range cand[1:] {
		m = max(m, c.logit)
	}
	for i := range cand {
		cand[i].weight = Exp(cand[i].logit - m)
	}
}

// blockedSum is the sum of the weights of cand (in id order), blocked by
// id.
func blockedSum(cand []candidate) float64 {
	var total float64
	for lo := 0; lo < len(cand); {
		part, hi := blockPart(cand, lo)
		total += part
		lo = hi
	}
	return total
}

// blockPart sums the weights of the block starting at cand[lo] (in order)
// and returns where the next block starts.
func blockPart(cand []candidate, lo int) (part float64, hi int) {
	b := cand[lo].id / Block
	for hi = lo; hi < len(cand) && cand[hi].id/Block == b; hi++ {
		part += cand[hi].weight
	}
	return part, hi
}

// MassBits is the fixed point of top-p's masses: a weight w counts
// floor(w·2**MassBits), so that masses add exactly, in any order (a row of
// 2**23 weights of at most 1 stays below 2**63).
const MassBits = 40

func mass(w float64) int64 { return int64(w * (1 << MassBits)) }

// nucleus keeps the candidates top-p keeps, in id order: transformers
// drops a token when the probability of it and all less probable ones is
// ≤ 1−topP, that is when the mass of the tokens above it reaches topP.
// Here the mass above a token is that of the tokens with a strictly larger
// logit, in integers (MassBits), so tokens of equal logit stay or go
// together (as ties with top-k's K-th do) and the sums need no order: a
// device finds the cut with a radix select rather than a sort. The most
// probable tokens always stay.
func (s *Sampler) nucleus(cand []candidate, topP float64) []candidate {
	var total int64
	for _, c := range cand {
		total += mass(c.weight)
	}
	limit := int64(float64(total) * topP)
	cut, ok := 0.0, false
	for m := nucleusFirst; !ok; m *= 4 {
		cut, ok = s.cutAmong(cand, m, limit)
	}
	kept := cand[:0]
	for _, c := range cand {
		if c.logit >= cut {
			kept = append(kept, c)
		}
	}
	return kept
}

// nucleusFirst is how many of the most probable candidates nucleus sorts
// first; a wider nucleus sorts 4× as many, up to all.
const nucleusFirst = 64

// cutAmong is top-p's cut (the least logit kept) found among the m most
// probable candidates, ties included; ok is false when the nucleus may
// reach past them.
func (s *Sampler) cutAmong(cand []candidate, m int, limit int64) (cut float64, ok bool) {
	top, complete := s.sorted[:0], m >= len(cand)
	if complete {
		top = append(top, cand...)
	} else {
		vals := s.vals[:0]
		for _, c := range cand {
			vals = append(vals, c.logit)
		}
		var thr float64
		s.vals = vals
		s.heap64, thr = kthLargest(s.heap64, vals, m)
		for _, c := range cand {
			if c.logit >= thr {
				top = append(top, c) // whole groups: every tie with thr is in
			}
		}
	}
	s.sorted = top
	slices.SortFunc(top, func(a, b candidate) int { return cmp.Compare(b.logit, a.logit) })
	cut = top[0].logit
	var above int64
	for i := 0; i < len(top); {
		if above >= limit {
			return cut, true
		}
		cut = top[i].logit
		for v := cut; i < len(top) && top[i].logit == v; i++ {
			above += mass(top[i].weight)
		}
	}
	return cut, complete || above >= limit
}

// draw picks a candidate (in id order) in proportion to its weight with
// the uniform u: the first whose running weight passes u·total, the
// running weight taken block by block as blockedSum takes it (the blocks
// before, then the block's entries). A pick that rounding leaves in no
// entry takes the last weighted entry of the block (or of the list).
func draw(cand []candidate, u float64) int {
	t := u * blockedSum(cand)
	var done float64 // the blocks before this one
	last := 0
	for lo := 0; lo < len(cand); {
		part, hi := blockPart(cand, lo)
		if t < done+part {
			return cand[lo+pickInBlock(cand[lo:hi], done, t)].id
		}
		done += part
		for i := lo; i < hi; i++ {
			if cand[i].weight > 0 {
				last = i
			}
		}
		lo = hi
	}
	return cand[last].id
}

// pickInBlock returns the first entry of blk whose running weight (from
// done) passes t, or its last weighted entry.
func pickInBlock(blk []candidate, done, t float64) int {
	run, last := done, 0
	for i, c := range blk {
		if c.weight > 0 {
			last = i
		}
		run += c.weight
		if t < run {
			return i
		}
	}
	return last
}
