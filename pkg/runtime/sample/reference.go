package sample

import (
	"fmt"
	"math"
)

// A backend that keeps the logits elsewhere (the GPU engine) can narrow a
// row to its top-k candidates there and pass only those to the sampler:
// with a top-k filter on and no penalty, every later step of Sample (the
// temperature, top-p, min-p and the draw) reads only the tokens whose logit
// is at least the K-th largest, in id order. So SampleCandidates over
// TopKCandidates(row, k) returns the same token as Sample(row), from the
// same random stream, bit for bit: it runs the same code on the same list.

// CandidateK returns the k for which SampleCandidates may replace Sample on
// a vocabulary of V logits, or 0 when the whole row is needed: greedy (the
// backend's argmax serves it), no top-k filter or one that keeps the whole
// row, or a penalty (it changes logits before the filter).
func (s *Sampler) CandidateK(V int) int {
	if s.p.Temperature == 0 || s.p.TopK <= 0 || s.p.TopK >= V || s.p.penalized() {
		return 0
	}
	return s.p.TopK
}

// TopKCandidates is the reference of the backends' candidate selection: the
// ids (ascending) and logits of the entries of logits that are at least its
// k-th largest value and not −Inf, the list Sample's top-k filter keeps
// (1 ≤ k < len(logits)). The logits must hold no NaN or +Inf (Sample
// reports those; a backend passes such a row whole).
func TopKCandidates(logits []float32, k int) (ids []int32, vals []float32) {
	var s Sampler
	threshold := s.kthLargest(logits, k)
	for id, l := range logits {
		if l >= threshold && !math.IsInf(float64(l), -1) {
			ids = append(ids, int32(id))
			vals = append(vals, l)
		}
	}
	return ids, vals
}

// SampleCandidates picks the next token from the candidates a backend
// selected as TopKCandidates(row, CandidateK(V)) does: ids ascending, none
// −Inf, with their raw logits. It is Sample for that row.
func (s *Sampler) SampleCandidates(ids []int32, logits []float32) (int, error) {
	if len(ids) == 0 || len(ids) != len(logits) {
		return 0, fmt.Errorf("sample: %d candidate ids for %d logits", len(ids), len(logits))
	}
	if s.p.Temperature == 0 || s.p.penalized() {
		return 0, fmt.Errorf("sample: candidates need a temperature and no penalty")
	}
	cand := s.cand[:0]
	for i, l := range logits {
		if l != l || math.IsInf(float64(l), 0) || (i > 0 && ids[i] <= ids[i-1]) {
			return 0, fmt.Errorf("sample: candidate %d (id %d, logit %v) is not finite or out of order", i, ids[i], l)
		}
		cand = append(cand, candidate{id: int(ids[i]), logit: float64(l) / s.p.Temperature})
	}
	s.cand = cand
	cand = s.topP(cand)
	cand = s.minP(cand)
	return s.draw(cand), nil
}
