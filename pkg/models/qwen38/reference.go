package qwen38

// What other engines of qwen4_exp (the GPU engine, pkg/gpu/qwen38gpu) take
// from this package: the n-gram row hashing with its history, and the
// pure functions their kernels are tested against.

// NgramHasher computes one PLE layer's table row ids token by token
// (§3.4), carrying the sequence's n-gram history (N−1 EOS when fresh).
type NgramHasher struct {
	consts        ngramConsts
	hist          ngramHistory
	eos, perNgram int
	fresh         ngramHistory
}

// NewNgramHasher is the hasher of the k-th PLE layer of c.
func NewNgramHasher(c Config, k int) *NgramHasher {
	return &NgramHasher{consts: newNgramConsts(c, k), hist: newNgramHistory(c), fresh: newNgramHistory(c), eos: c.EOS, perNgram: c.HeadsPerNgram}
}

// Rows appends the NH row ids of each of ids to dst, advancing the history.
func (h *NgramHasher) Rows(dst []int64, ids []int) []int64 {
	for _, id := range ids {
		dst = h.consts.rowIDs(dst, h.hist, id, h.eos, h.perNgram)
	}
	return dst
}

// Reset forgets the history (a fresh sequence).
func (h *NgramHasher) Reset() { copy(h.hist, h.fresh) }

// Clone is an independent copy with the same history.
func (h *NgramHasher) Clone() *NgramHasher {
	c := *h
	c.hist = append(ngramHistory(nil), h.hist...)
	return &c
}

// GroupedRMSNorm is the grouped RMSNorm of rows x [T, S·H] (§3.1): each
// H-wide stream normalised on its own with its slice of scale (1 + w).
func GroupedRMSNorm(dst, x, scale []float32, H, SH int, eps float32) {
	groupedRMSNorm(dst, x, scale, H, SH, eps)
}

// SignedSqrt is the PLE gate's sign(g)·sqrt(max(|g|, 1e-6)).
func SignedSqrt(g float32) float32 { return signedSqrt(g) }

// TopBlocks is the QSA indexer's selection: the indices of the n best
// scores in the order (−score, index), as a set (no particular order).
func TopBlocks(scores []float32, n int) []int { return topBlocks(scores, n, nil) }

// CheckConstants compares hashing constants stored elsewhere (an install
// manifest's ngram entry: where, in the error) with the config's formulas,
// as New does with a checkpoint's int64 buffers.
func (h *NgramHasher) CheckConstants(where string, mult, primes, offsets []int64) error {
	for _, c := range []struct {
		name      string
		got, want []int64
	}{{"multipliers", mult, h.consts.mult}, {"vocab_sizes", primes, h.consts.primes}, {"offsets", offsets, h.consts.offsets}} {
		if err := h.consts.check(where+"."+c.name, c.got, c.want); err != nil {
			return err
		}
	}
	return nil
}
