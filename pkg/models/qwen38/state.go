package qwen38

import (
	"fmt"
	"math/rand/v2"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// StateOptions sizes a State. Zero fields take defaults.
type StateOptions struct {
	KVInitial  int // tokens of KV storage allocated up front; default blocks.DefaultKVInitial, clamped to MaxContext
	MaxContext int // tokens the sequence may reach; default max_position_embeddings
	// KVBits is the width of the attention layers' K and V (model.KVInt8,
	// KVBF16 or KVFloat32, docs/kv-cache.md); 0 means KVFloat32, which
	// the package's tests compare with transformers. The runtime's default
	// is model.DefaultKVBits. The indexer's keys are float32 at every width.
	KVBits int
}

// State is one sequence (§4): every Gated DeltaNet layer's conv window and
// recurrent matrices, every attention layer's keys, values and indexer
// keys, every PLE layer's n-gram history and conv window, plus Forward's
// scratch. It is not safe for concurrent use.
type State struct {
	model      *Model
	pos        int
	maxContext int
	kvCap      int // tokens every attention layer holds without growing
	kvBits     int
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

// NewState returns an empty sequence for m. It panics on a KVBits that
// model.ValidKVBits rejects: callers validate their flags.
func (m *Model) NewState(opts StateOptions) *State {
	bits, maxCtx := m.stateDefaults(opts)
	initial := opts.KVInitial
	if initial <= 0 {
		initial = blocks.DefaultKVInitial
	}
	initial = min(initial, maxCtx)
	if !model.ValidKVBits(bits) {
		panic(fmt.Sprintf("qwen38: KV width %d bits: want 8, 16 or 32", bits))
	}
	c := m.cfg
	st := &State{model: m, maxContext: maxCtx, kvCap: initial, kvBits: bits, layers: make([]layerState, len(m.layers)), ple: make([]pleState, len(m.ple))}
	for i, ly := range m.layers {
		switch ly.kind {
		case LinearAttention:
			st.layers[i].conv = make([]float32, (c.ConvKernel-1)*c.ConvChannels())
			st.layers[i].rec = make([]float32, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		case SparseAttention:
			st.layers[i].attn = newAttnState(c, bits, initial)
		}
	}
	for i := range st.ple {
		st.ple[i] = pleState{hist: newNgramHistory(c), conv: make([]float32, (c.PLEConvKernel-1)*c.NgramSize*c.StreamWidth())}
	}
	return st
}

// Len is the number of tokens the state has consumed.
func (s *State) Len() int { return s.pos }

// KVBits is the width of the attention layers' K and V.
func (s *State) KVBits() int { return s.kvBits }

// KVCapacity is how many tokens the attention layers hold before they next
// grow.
func (s *State) KVCapacity() int { return s.kvCap }

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
		ls.attn.kraw, ls.attn.kb = ls.attn.kraw[:0], ls.attn.kb[:0]
	}
	for i := range s.ple {
		s.ple[i].hist = newNgramHistory(s.model.cfg)
		clear(s.ple[i].conv)
	}
	s.pos, s.failed = 0, nil
}

// Clone returns an independent copy of the sequence (without tap or
// profile). The copy has the same KV capacity and width, but only the
// written tokens are copied, so untouched capacity costs no page faults.
func (s *State) Clone() *State {
	c := &State{model: s.model, pos: s.pos, maxContext: s.maxContext, kvCap: s.kvCap, kvBits: s.kvBits, failed: s.failed,
		layers: make([]layerState, len(s.layers)), ple: make([]pleState, len(s.ple))}
	for i, ls := range s.layers {
		c.layers[i] = layerState{conv: clone(ls.conv), rec: clone(ls.rec), attn: ls.attn.resized(&s.model.cfg, s.kvCap, s.pos)}
	}
	for i, p := range s.ple {
		c.ple[i] = pleState{hist: append(ngramHistory(nil), p.hist...), conv: clone(p.conv)}
	}
	return c
}

// CloneFor is Clone for a session of model m with its own max context and
// KV width: it refuses a state of another model, of another width or
// longer than maxContext.
func (s *State) CloneFor(m *Model, maxContext, kvBits int) (*State, error) {
	switch {
	case s.model != m:
		return nil, fmt.Errorf("qwen38: the state belongs to another model")
	case s.kvBits != kvBits:
		return nil, fmt.Errorf("qwen38: the state's KV cache is %d-bit, this session's %d-bit; a snapshot is only restored at the width it was taken", s.kvBits, kvBits)
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

// KVBytes is the memory the attention layers' caches hold now, their
// capacity (keys and values at the cache's width, the indexer's raw and
// block keys in float32).
func (s *State) KVBytes() int64 {
	var n int64
	for _, ls := range s.layers {
		if ls.attn.kv != nil {
			n += ls.attn.kv.Bytes() + 4*int64(cap(ls.attn.kraw)+cap(ls.attn.kb))
		}
	}
	return n
}

// growKV makes every attention layer hold at least need tokens, doubling
// from the current capacity up to MaxContext, and carries the tokens
// already written across.
func (s *State) growKV(need int) {
	if need <= s.kvCap {
		return
	}
	s.kvCap = blocks.GrownKVCapacity(s.kvCap, need, s.maxContext)
	for i := range s.layers {
		if as := &s.layers[i].attn; as.kv != nil {
			*as = as.resized(&s.model.cfg, s.kvCap, s.pos)
		}
	}
}

// FillSynthetic makes the sequence n tokens long by writing random keys
// and values (unit normal, a few dozen distinct rows in a fixed order)
// into every attention layer in its width, random raw indexer keys, and
// the block keys they give. The GDN and PLE state is left as it is. It
// stands in for a long prefill when measuring the memory and the
// attention cost of a long context; the logits that follow mean nothing.
func (s *State) FillSynthetic(n int, seed uint64) error {
	switch {
	case n < s.pos:
		return fmt.Errorf("qwen38: FillSynthetic: %d tokens is shorter than the %d already held", n, s.pos)
	case n > s.maxContext:
		return fmt.Errorf("qwen38: FillSynthetic: %d tokens is past the max context of %d", n, s.maxContext)
	}
	s.growKV(n)
	// Drawing 2·n rows of normals would take longer than the measurement.
	const distinct = 61
	c := &s.model.cfg
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	row, dih := c.kvDim(), c.IndexerDim
	rows := make([]float32, distinct*row)
	for j := range rows {
		rows[j] = float32(rng.NormFloat64())
	}
	at := func(i, w int) []float32 { return rows[(i%distinct)*row:][:w] }
	for i := range s.layers {
		as := &s.layers[i].attn
		if as.kv == nil {
			continue
		}
		for p := s.pos; p < n; p++ {
			as.kv.PutKV(p, at(p+i, row), at(7*p+i+1, row))
			as.kraw = append(as.kraw, at(3*p+i+2, dih)...)
		}
		s.model.completeBlocks(s.model.layers[i].attn, as, n)
	}
	s.pos = n
	return nil
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
