package qwen38

import "fmt"

// StateOptions sizes a State. Zero fields take defaults.
type StateOptions struct {
	MaxContext int // tokens the sequence may reach; default max_position_embeddings
}

// State is one sequence (§4): every Gated DeltaNet layer's conv window and
// recurrent matrices, every attention layer's keys, values and indexer
// keys, every PLE layer's n-gram history and conv window, plus Forward's
// scratch. It is not safe for concurrent use.
type State struct {
	model      *Model
	pos        int
	maxContext int
	layers     []layerState
	ple        []pleState // by rank among the PLE layers
	failed     error
	tap        Tap
	profile    *StepProfile
	ws         workspace
}

type layerState struct {
	conv, rec []float32 // GDN
	attn      attnState
}

// NewState returns an empty sequence for m.
func (m *Model) NewState(opts StateOptions) *State {
	maxCtx := opts.MaxContext
	if maxCtx <= 0 {
		maxCtx = m.cfg.MaxContext
	}
	c := m.cfg
	st := &State{model: m, maxContext: maxCtx, layers: make([]layerState, len(m.layers)), ple: make([]pleState, len(m.ple))}
	for i, ly := range m.layers {
		if ly.kind == LinearAttention {
			st.layers[i].conv = make([]float32, (c.ConvKernel-1)*c.ConvChannels())
			st.layers[i].rec = make([]float32, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		}
	}
	for i := range st.ple {
		st.ple[i] = pleState{hist: newNgramHistory(c), conv: make([]float32, (c.PLEConvKernel-1)*c.NgramSize*c.StreamWidth())}
	}
	return st
}

// Len is the number of tokens the state has consumed.
func (s *State) Len() int { return s.pos }

// MaxContext is the most tokens the state can hold.
func (s *State) MaxContext() int { return s.maxContext }

// SetTap installs fn to observe hidden states during Forward (nil removes it).
func (s *State) SetTap(fn Tap) { s.tap = fn }

// SetStepProfile makes the state's decode steps add to p (nil stops it).
func (s *State) SetStepProfile(p *StepProfile) { s.profile = p }

// Reset empties the sequence, keeping its storage.
func (s *State) Reset() {
	for i := range s.layers {
		ls := &s.layers[i]
		clear(ls.conv)
		clear(ls.rec)
		ls.attn = attnState{k: ls.attn.k[:0], v: ls.attn.v[:0], kraw: ls.attn.kraw[:0], kb: ls.attn.kb[:0]}
	}
	for i := range s.ple {
		s.ple[i].hist = newNgramHistory(s.model.cfg)
		clear(s.ple[i].conv)
	}
	s.pos, s.failed = 0, nil
}

// Clone returns an independent copy of the sequence (without tap or profile).
func (s *State) Clone() *State {
	c := &State{model: s.model, pos: s.pos, maxContext: s.maxContext, failed: s.failed,
		layers: make([]layerState, len(s.layers)), ple: make([]pleState, len(s.ple))}
	for i, ls := range s.layers {
		c.layers[i] = layerState{conv: clone(ls.conv), rec: clone(ls.rec), attn: attnState{
			k: clone(ls.attn.k), v: clone(ls.attn.v), kraw: clone(ls.attn.kraw), kb: clone(ls.attn.kb)}}
	}
	for i, p := range s.ple {
		c.ple[i] = pleState{hist: append(ngramHistory(nil), p.hist...), conv: clone(p.conv)}
	}
	return c
}

// CloneFor is Clone for a session of model m with its own max context:
// it refuses a state of another model or one longer than maxContext.
func (s *State) CloneFor(m *Model, maxContext int) (*State, error) {
	switch {
	case s.model != m:
		return nil, fmt.Errorf("qwen38: the state belongs to another model")
	case s.pos > maxContext:
		return nil, fmt.Errorf("qwen38: the state holds %d tokens, past a max context of %d", s.pos, maxContext)
	}
	c := s.Clone()
	c.maxContext = maxContext
	return c, nil
}

func clone(x []float32) []float32 {
	if x == nil {
		return nil
	}
	return append([]float32(nil), x...)
}

// KVBytes is the memory the attention layers' caches hold now (keys,
// values, indexer raw and block keys, all float32).
func (s *State) KVBytes() int64 {
	var n int
	for _, ls := range s.layers {
		n += cap(ls.attn.k) + cap(ls.attn.v) + cap(ls.attn.kraw) + cap(ls.attn.kb)
	}
	return 4 * int64(n)
}

func (s *State) check(m *Model) error {
	switch {
	case s == nil || s.model != m:
		return fmt.Errorf("qwen38: Forward: the state was not made by this model's NewState")
	case s.failed != nil:
		return fmt.Errorf("qwen38: Forward: the state is inconsistent after an earlier failure (%v); Reset it", s.failed)
	}
	return nil
}
