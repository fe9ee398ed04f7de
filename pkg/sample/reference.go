package sample

import "math"

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

// TopKThreshold is the k-th largest value of logits (1 ≤ k < len), the
// least logit top-k keeps.
func TopKThreshold(logits []float32, k int) float32 {
	var s Sampler
	return s.kthLargest(logits, k)
}

// Reference is what a backend's Sample must return for st over row, with
// the penalties of history (the tokens a sampler accepted, in order).
func Reference(st Step, history []int32, row []float32) (int, error) {
	s := Sampler{p: st.Params}
	for _, id := range history {
		s.Accept(int(id))
	}
	return s.Finish(st, row)
}
