package qwen35

import (
	"fmt"
)

// DefaultKVInitial is the KV capacity in tokens a State starts with: small
// enough that a short chat does not reserve the whole context, large enough
// that growth (a doubling copy) is rare.
const DefaultKVInitial = 8192

// StateOptions sizes a State. Zero fields take defaults.
type StateOptions struct {
	KVInitial  int // tokens of KV storage allocated up front; default DefaultKVInitial, clamped to MaxContext
	MaxContext int // tokens the sequence may reach; default the model's max_position_embeddings
}

// State is one sequence: the conv window and recurrent matrix of every
// Gated DeltaNet layer and the KV cache of every full-attention layer, plus
// the scratch buffers a Forward needs. It is not safe for concurrent use.
type State struct {
	model      *Model
	pos        int // tokens consumed; the position of the next token
	maxContext int
	kvInitial  int
	kvCap      int // tokens every KV cache can hold without growing
	layers     []layerState
	failed     error // set when a Forward failed half-way; the state is then inconsistent
	tap        Tap
	profile    *StepProfile // decode steps' phase times, or nil
	ws         workspace
}

type layerState struct {
	conv []float32 // GDN: last K−1 pre-conv projections [K−1, C], oldest first
	rec  []float32 // GDN: recurrent matrices S [Hv, Dk, Dv]
	k, v []float32 // attention: [kvCap, Hkv·Dh]; k after k_norm and RoPE, v raw
}

// NewState returns an empty sequence for m.
func (m *Model) NewState(opts StateOptions) *State {
	maxCtx := opts.MaxContext
	if maxCtx <= 0 {
		maxCtx = m.cfg.MaxContext
	}
	initial := opts.KVInitial
	if initial <= 0 {
		initial = DefaultKVInitial
	}
	initial = min(initial, maxCtx)
	st := &State{model: m, maxContext: maxCtx, kvInitial: initial, layers: make([]layerState, len(m.layers))}
	c := m.cfg
	for i, ly := range m.layers {
		switch ly.kind {
		case LinearAttention:
			st.layers[i].conv = make([]float32, (c.ConvKernel-1)*c.ConvChannels())
			st.layers[i].rec = make([]float32, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		case FullAttention:
			st.layers[i].k = make([]float32, initial*c.kvDim())
			st.layers[i].v = make([]float32, initial*c.kvDim())
		}
	}
	st.kvCap = initial
	return st
}

// Len is the number of tokens the state has consumed.
func (s *State) Len() int { return s.pos }

// MaxContext is the most tokens the state can hold.
func (s *State) MaxContext() int { return s.maxContext }

// KVCapacity is how many tokens the KV caches hold before they next grow.
func (s *State) KVCapacity() int { return s.kvCap }

// SetTap installs fn to observe hidden states during Forward (nil removes it).
func (s *State) SetTap(fn Tap) { s.tap = fn }

// Reset empties the sequence, keeping its allocated KV storage.
func (s *State) Reset() {
	for i := range s.layers {
		clear(s.layers[i].conv)
		clear(s.layers[i].rec)
	}
	s.pos = 0
	s.failed = nil
}

// Clone returns an independent copy of the sequence (without the tap), e.g.
// to keep a snapshot of a chat prefix. The copy has the same KV capacity but
// only the written tokens are copied, so untouched capacity costs no page
// faults.
func (s *State) Clone() *State {
	c := &State{
		model: s.model, pos: s.pos, maxContext: s.maxContext, kvInitial: s.kvInitial,
		kvCap: s.kvCap, failed: s.failed, layers: make([]layerState, len(s.layers)),
	}
	used := s.pos * s.model.cfg.kvDim()
	for i, ls := range s.layers {
		cl := layerState{conv: cloneFloats(ls.conv), rec: cloneFloats(ls.rec)}
		if ls.k != nil {
			cl.k = make([]float32, len(ls.k))
			cl.v = make([]float32, len(ls.v))
			copy(cl.k, ls.k[:used])
			copy(cl.v, ls.v[:used])
		}
		c.layers[i] = cl
	}
	return c
}

// CopyFrom makes s an exact copy of src's sequence (not its tap or its
// options), reusing s's storage where it is large enough. Both must belong
// to the same Model, and src.Len() must fit s.MaxContext().
func (s *State) CopyFrom(src *State) error {
	if src.model != s.model {
		return fmt.Errorf("qwen35: CopyFrom: the states belong to different models")
	}
	if src.pos > s.maxContext {
		return fmt.Errorf("qwen35: CopyFrom: source holds %d tokens, this state's max context is %d", src.pos, s.maxContext)
	}
	s.pos = 0 // growKV copies only the first pos tokens: nothing to keep
	if err := s.growKV(src.pos); err != nil {
		return err
	}
	row := s.model.cfg.kvDim()
	for i, ls := range src.layers {
		dst := &s.layers[i]
		copy(dst.conv, ls.conv)
		copy(dst.rec, ls.rec)
		if dst.k != nil {
			copy(dst.k, ls.k[:src.pos*row])
			copy(dst.v, ls.v[:src.pos*row])
		}
	}
	s.pos = src.pos
	s.failed = src.failed
	return nil
}

func cloneFloats(x []float32) []float32 {
	if x == nil {
		return nil
	}
	return append([]float32(nil), x...)
}

// growKV makes every KV cache hold at least need tokens, doubling from the
// current capacity and clamping to MaxContext, and carries the tokens
// already written across.
func (s *State) growKV(need int) error {
	if need > s.maxContext {
		return fmt.Errorf("qwen35: sequence would reach %d tokens, past its max context of %d; start a new sequence or raise StateOptions.MaxContext", need, s.maxContext)
	}
	if need <= s.kvCap {
		return nil
	}
	newCap := max(s.kvCap, 1)
	for newCap < need {
		newCap *= 2
	}
	newCap = min(newCap, s.maxContext)
	row := s.model.cfg.kvDim()
	for i := range s.layers {
		ls := &s.layers[i]
		if ls.k == nil {
			continue
		}
		k := make([]float32, newCap*row)
		v := make([]float32, newCap*row)
		copy(k, ls.k[:s.pos*row])
		copy(v, ls.v[:s.pos*row])
		ls.k, ls.v = k, v
	}
	s.kvCap = newCap
	return nil
}
