package sample

// The probabilities are computed so that a GPU can compute the very same
// numbers: one portable Exp (exp.go), every sum taken in a fixed order, and
// sums over a row taken in blocks of Block consecutive ids (each block in
// order, then the blocks in order), so a device may take the blocks in
// parallel and still add the same numbers in the same order. Zero weights
// (tokens a filter removed) change no sum, so the host adds only the
// candidates it kept and the device may add the whole row.

// Block is the number of consecutive entries a blocked sum adds in order
// before adding their sum to the running total (kernels.cu's SAMP_BLOCK).
const Block = 512

// blockOf names the block of cand[i] in a blocked sum.
type blockOf func(i int, c candidate) int

// blockOfID blocks a list in id order by id (a row's consecutive ids).
func blockOfID(_ int, c candidate) int { return c.id / Block }

// blockOfPosition blocks a sorted list by position.
func blockOfPosition(i int, _ candidate) int { return i / Block }

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

// blockedSum is the sum of the weights, blocked as block says.
func blockedSum(cand []candidate, block blockOf) float64 {
	var total float64
	for lo := 0; lo < len(cand); {
		part, hi := blockPart(cand, lo, block)
		total += part
		lo = hi
	}
	return total
}

// blockPart sums the weights of the block starting at cand[lo] (in order)
// and returns where the next block starts.
func blockPart(cand []candidate, lo int, block blockOf) (part float64, hi int) {
	b := block(lo, cand[lo])
	for hi = lo; hi < len(cand) && block(hi, cand[hi]) == b; hi++ {
		part += cand[hi].weight
	}
	return part, hi
}

// nucleus is how many of cand (sorted, most probable first) top-p keeps:
// transformers drops a token when the probability of it and all less
// probable ones is ≤ 1−topP, that is when the probability of the tokens
// above it is ≥ topP; the most probable is always kept. Walking from the
// top needs only the tokens kept (and total, the sum of all weights), so a
// device may look at the few most probable rather than sort the row.
func nucleus(cand []candidate, total, topP float64) int {
	var above float64
	keep := 0
	for j, c := range cand {
		if j > 0 && above >= topP {
			break
		}
		keep = j + 1
		above += c.weight / total
	}
	return keep
}

// draw picks a candidate in proportion to its weight with the uniform u:
// the first whose running weight passes u·total, the running weight taken
// block by block as blockedSum takes it (the block, then its entries). A
// pick that rounding leaves in no entry takes the last weighted entry of
// the block (or of the list).
func draw(cand []candidate, block blockOf, u float64) int {
	t := u * blockedSum(cand, block)
	var done float64 // the blocks before this one
	last := 0
	for lo := 0; lo < len(cand); {
		part, hi := blockPart(cand, lo, block)
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
