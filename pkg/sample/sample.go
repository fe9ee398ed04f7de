// Package sample picks the next token from logits the way Hugging Face
// transformers does with a generation_config.json: greedy when not
// sampling, otherwise penalties, temperature, top-k, top-p, min-p, then a
// draw from the remaining distribution. The draw uses math/rand/v2's PCG
// seeded from Params.Seed, so a seed reproduces a generation exactly
// (transformers' torch RNG stream itself cannot be reproduced), and the
// float64 math is defined so that every machine and the GPU engine compute
// the same bits (docs/sampling.md).
package sample

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
)

// Params are the sampling settings. The zero value is greedy decoding.
type Params struct {
	// Temperature divides the logits; 0 means greedy (argmax, lowest id on
	// ties), which is also what do_sample=false means.
	Temperature float64
	// TopK keeps the TopK highest logits (and any tied with the K-th); 0
	// disables it, as in transformers.
	TopK int
	// TopP keeps the most probable tokens whose cumulative probability
	// reaches TopP (transformers' nucleus rule); 1 disables it. 0 also
	// disables it, so that Params{Temperature: 0.7} means plain sampling;
	// transformers would treat top_p 0 as keep-only-the-best, which a tiny
	// positive TopP gives here.
	TopP float64
	// Seed seeds the PCG generator.
	Seed uint64
	// MinP keeps the tokens whose probability (after temperature) is at
	// least MinP times the most probable one's; 0 disables it. Applied
	// after top-p, as transformers orders its warpers.
	MinP float64
	// Penalties over the tokens this Sampler has already returned (the
	// generated history, not the prompt), applied to the raw logits first.
	// PresencePenalty and FrequencyPenalty are OpenAI's: logit −=
	// presence·[count>0] + frequency·count; 0 disables them.
	// RepetitionPenalty is transformers' (CTRL): a seen token's logit is
	// divided by it when positive, multiplied when negative; 0 or 1
	// disables it. Unused penalties leave sampling bitwise unchanged.
	PresencePenalty   float64
	FrequencyPenalty  float64
	RepetitionPenalty float64
}

func (p Params) penalized() bool {
	return p.PresencePenalty != 0 || p.FrequencyPenalty != 0 || (p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1)
}

// Validate reports parameters transformers would refuse, and ours.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || math.IsInf(p.Temperature, 0) || p.Temperature < 0:
		return fmt.Errorf("sample: temperature %v must be a finite number ≥ 0 (0 = greedy)", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top_k %d must be ≥ 0 (0 = disabled)", p.TopK)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("sample: top_p %v must be in [0, 1] (0 or 1 = disabled)", p.TopP)
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("sample: min_p %v must be in [0, 1] (0 = disabled)", p.MinP)
	case !finiteIn(p.PresencePenalty, -2, 2):
		return fmt.Errorf("sample: presence_penalty %v must be in [-2, 2] (0 = disabled)", p.PresencePenalty)
	case !finiteIn(p.FrequencyPenalty, -2, 2):
		return fmt.Errorf("sample: frequency_penalty %v must be in [-2, 2] (0 = disabled)", p.FrequencyPenalty)
	case math.IsNaN(p.RepetitionPenalty) || math.IsInf(p.RepetitionPenalty, 0) || p.RepetitionPenalty < 0:
		return fmt.Errorf("sample: repetition_penalty %v must be a finite number > 0 (1 = disabled)", p.RepetitionPenalty)
	}
	return nil
}

// Sampler draws tokens; it is not safe for concurrent use.
type Sampler struct {
	p   Params
	rng *rand.Rand

	cand   []candidate // scratch: surviving tokens
	sorted []candidate // scratch: top-p's most probable candidates by logit
	heap   []float32
	vals   []float64 // scratch: candidates' logits, and a heap of them
	heap64 []float64

	counts    map[int]int // generated tokens so far, when a penalty is on
	history   []int32     // the same tokens in order, for a backend's copy of counts
	penalized []float32   // scratch: logits after penalties
}

func finiteIn(x, lo, hi float64) bool { return !math.IsNaN(x) && x >= lo && x <= hi }

type candidate struct {
	id     int
	logit  float64 // after temperature
	weight float64 // Exp(logit − the largest logit)
}

// seedStream is the PCG stream selector; fixed so a seed alone determines
// the sequence.
const seedStream = 0x6e766d6169 // "nvmai"

// New returns a Sampler for p.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, seedStream))}, nil
}

// Params returns the sampler's settings.
func (s *Sampler) Params() Params { return s.p }

// Greedy returns the index of the largest logit, the lowest on ties.
// It fails on empty logits or on NaN, which means a broken forward pass.
func Greedy(logits []float32) (int, error) {
	if len(logits) == 0 {
		return 0, fmt.Errorf("sample: no logits")
	}
	best := -1
	for i, v := range logits {
		if v != v {
			return 0, fmt.Errorf("sample: logit %d is NaN", i)
		}
		if best < 0 || v > logits[best] {
			best = i
		}
	}
	return best, nil
}

// Step is one token's sampling with its random number already drawn, so a
// backend can pick the token where its logits are (Finish is the
// reference) and, when it cannot, the host picks the same one.
type Step struct {
	Params
	U       float64 // the draw's uniform number in [0, 1); 0 when greedy
	LogMinP float64 // ln(MinP); −Inf when min-p is off
}

// Penalized reports whether the step changes logits by the history first.
func (st Step) Penalized() bool { return st.Params.penalized() }

// Next prepares the next token's Step, drawing its random number.
func (s *Sampler) Next() Step {
	st := Step{Params: s.p, LogMinP: math.Inf(-1)}
	if st.TopP >= 1 {
		st.TopP = 0
	}
	if st.MinP > 0 {
		st.LogMinP = math.Log(st.MinP)
	}
	if st.Temperature > 0 {
		st.U = s.rng.Float64()
	}
	return st
}

// Accept records id as generated: the penalties count it.
func (s *Sampler) Accept(id int) {
	if !s.p.penalized() {
		return
	}
	if s.counts == nil {
		s.counts = map[int]int{}
	}
	s.counts[id]++
	s.history = append(s.history, int32(id))
}

// History is the tokens Accept recorded, in order (only with a penalty
// on); the slice is the sampler's, read it before the next Accept.
func (s *Sampler) History() []int32 { return s.history }

// Sample picks the next token from logits [V] and records it.
// With a penalty on, logits is left untouched.
func (s *Sampler) Sample(logits []float32) (int, error) {
	id, err := s.Finish(s.Next(), logits)
	if err == nil {
		s.Accept(id)
	}
	return id, err
}

// Finish picks st's token from logits [V] (penalties, then temperature,
// top-k, top-p, min-p and the draw; docs/sampling.md): the computation a
// backend reproduces bit for bit. It does not record the token (Accept).
func (s *Sampler) Finish(st Step, logits []float32) (int, error) {
	row := logits
	if st.Penalized() {
		row = s.applyPenalties(st.Params, logits)
	}
	if st.Temperature == 0 {
		return Greedy(row)
	}
	if err := checkLogits(row); err != nil {
		return 0, err
	}
	cand := s.topK(st, row)
	weigh(cand)
	if st.TopP > 0 {
		cand = s.nucleus(cand, st.TopP)
	}
	return draw(minP(cand, st.LogMinP), st.U), nil
}

// applyPenalties returns a copy of logits with the history's penalties.
// Each product rounds on its own (no fused multiply-add), as on a GPU.
func (s *Sampler) applyPenalties(p Params, logits []float32) []float32 {
	s.penalized = append(s.penalized[:0], logits...)
	out := s.penalized
	for id, n := range s.counts {
		if id < 0 || id >= len(out) {
			continue
		}
		out[id] = penalize(p, out[id], n)
	}
	return out
}

// penalize is one seen token's logit after the penalties (n > 0 times).
func penalize(p Params, logit float32, n int) float32 {
	l := float64(logit)
	if r := p.RepetitionPenalty; r != 0 && r != 1 {
		if l > 0 {
			l /= r
		} else {
			l = float64(l * r)
		}
	}
	l -= p.PresencePenalty + float64(p.FrequencyPenalty*float64(n))
	return float32(l)
}

// minP keeps candidates with p ≥ MinP·p_max, i.e. logit ≥ max + ln(MinP),
// which needs no softmax; order is kept.
func minP(cand []candidate, logMinP float64) []candidate {
	if math.IsInf(logMinP, -1) || len(cand) == 0 {
		return cand
	}
	m := math.Inf(-1)
	for _, c := range cand {
		m = max(m, c.logit)
	}
	threshold := m + logMinP
	kept := cand[:0]
	for _, c := range cand {
		if c.logit >= threshold {
			kept = append(kept, c)
		}
	}
	return kept
}

func checkLogits(logits []float32) error {
	if len(logits) == 0 {
		return fmt.Errorf("sample: no logits")
	}
	finite := false
	for i, v := range logits {
		switch {
		case v != v:
			return fmt.Errorf("sample: logit %d is NaN", i)
		case math.IsInf(float64(v), 1):
			return fmt.Errorf("sample: logit %d is +Inf", i)
		case !math.IsInf(float64(v), -1):
			finite = true
		}
	}
	if !finite {
		return fmt.Errorf("sample: every logit is -Inf")
	}
	return nil
}

// topK applies the temperature and keeps the tokens whose logit is at least
// the K-th largest (transformers removes those strictly below it, so ties
// with the K-th all stay). −Inf logits never survive. The K-th value comes
// from a size-K heap, so a 248k vocabulary is not sorted per token.
func (s *Sampler) topK(st Step, logits []float32) []candidate {
	threshold := float32(math.Inf(-1))
	if k := st.TopK; k > 0 && k < len(logits) {
		threshold = s.kthLargest(logits, k)
	}
	cand := s.cand[:0]
	for id, l := range logits {
		if l >= threshold && !math.IsInf(float64(l), -1) {
			cand = append(cand, candidate{id: id, logit: float64(l) / st.Temperature})
		}
	}
	s.cand = cand
	return cand
}

// kthLargest returns the k-th largest value of x (1 ≤ k < len(x)).
func (s *Sampler) kthLargest(x []float32, k int) float32 {
	var v float32
	s.heap, v = kthLargest(s.heap, x, k)
	return v
}

// kthLargest returns the k-th largest value of x (1 ≤ k < len(x)) from a
// size-k min-heap built in h (returned for reuse), so a 248k row is not
// sorted.
func kthLargest[T cmp.Ordered](h, x []T, k int) ([]T, T) {
	h = append(h[:0], x[:k]...)
	for i := k/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
	for _, v := range x[k:] {
		if v > h[0] {
			h[0] = v
			siftDown(h, 0)
		}
	}
	return h, h[0]
}

func siftDown[T cmp.Ordered](h []T, i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l] < h[least] {
			least = l
		}
		if r < len(h) && h[r] < h[least] {
			least = r
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}
