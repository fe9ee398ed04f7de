package qwen35

import (
	"fmt"
	"math/rand/v2"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// DefaultKVInitial is the KV capacity in tokens a State starts with
// (blocks.DefaultKVInitial).
const DefaultKVInitial = blocks.DefaultKVInitial

// StateOptions sizes a State. Zero fields take defaults.
type StateOptions struct {
	KVInitial  int // tokens of KV storage allocated up front; default DefaultKVInitial, clamped to MaxContext
	MaxContext int // tokens the sequence may reach; default the model's max_position_embeddings
	KVBits     int // KV cache width: KVInt8, KVBF16 or KVFloat32; 0 means KVFloat32 (see DefaultKVBits)
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
	kvBits     int
	layers     []layerState
	failed     error // set when a Forward failed half-way; the state is then inconsistent
	tap        Tap
	profile    *model.StepProfile // decode steps' phase times, or nil
	ws         workspace
}

type layerState struct {
	conv []float32 // GDN: last K−1 pre-conv projections [K−1, C], oldest first
	rec  []float32 // GDN: recurrent matrices S [Hv, Dk, Dv]
	kv   *kvCache  // attention: [kvCap, Hkv·Dh] each of K (after k_norm and RoPE) and V (raw)
}

// NewState returns an empty sequence for m. It panics on a KVBits that
// ValidKVBits rejects: callers validate their flags.
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
	bits := opts.KVBits
	if bits == 0 {
		bits = KVFloat32
	}
	if !ValidKVBits(bits) {
		panic(fmt.Sprintf("qwen35: KV width %d bits: want 8, 16 or 32", bits))
	}
	st := &State{model: m, maxContext: maxCtx, kvInitial: initial, kvBits: bits, layers: make([]layerState, len(m.layers))}
	c := m.cfg
	for i, ly := range m.layers {
		switch ly.kind {
		case LinearAttention:
			st.layers[i].conv = make([]float32, (c.ConvKernel-1)*c.ConvChannels())
			st.layers[i].rec = make([]float32, c.LinearValueHeads*c.LinearKeyDim*c.LinearValueDim)
		case FullAttention:
			st.layers[i].kv = blocks.NewKVCache(bits, initial, c.NumKVHeads, c.HeadDim)
		}
	}
	st.kvCap = initial
	return st
}

// Len is the number of tokens the state has consumed.
func (s *State) Len() int { return s.pos }

// MaxContext is the most tokens the state can hold.
func (s *State) MaxContext() int { return s.maxContext }

// KVBits is the KV cache's width.
func (s *State) KVBits() int { return s.kvBits }

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
		kvCap: s.kvCap, kvBits: s.kvBits, failed: s.failed, layers: make([]layerState, len(s.layers)),
	}
	for i, ls := range s.layers {
		cl := layerState{conv: cloneFloats(ls.conv), rec: cloneFloats(ls.rec)}
		if ls.kv != nil {
			cl.kv = ls.kv.Resized(s.kvCap, s.pos)
		}
		c.layers[i] = cl
	}
	return c
}

// CopyFrom makes s an exact copy of src's sequence (not its tap or its
// options), reusing s's storage where it is large enough. Both must belong
// to the same Model and have the same KV width, and src.Len() must fit
// s.MaxContext().
func (s *State) CopyFrom(src *State) error {
	if src.model != s.model {
		return fmt.Errorf("qwen35: CopyFrom: the states belong to different models")
	}
	if src.kvBits != s.kvBits {
		return fmt.Errorf("qwen35: CopyFrom: source KV cache is %d-bit, this state's is %d-bit", src.kvBits, s.kvBits)
	}
	if src.pos > s.maxContext {
		return fmt.Errorf("qwen35: CopyFrom: source holds %d tokens, this state's max context is %d", src.pos, s.maxContext)
	}
	s.pos = 0 // growKV copies only the first pos tokens: nothing to keep
	if err := s.growKV(src.pos); err != nil {
		return err
	}
	for i, ls := range src.layers {
		dst := &s.layers[i]
		copy(dst.conv, ls.conv)
		copy(dst.rec, ls.rec)
		if dst.kv != nil {
			dst.kv.CopyFrom(ls.kv, src.pos)
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
	newCap := blocks.GrownKVCapacity(s.kvCap, need, s.maxContext)
	for i := range s.layers {
		if ls := &s.layers[i]; ls.kv != nil {
			ls.kv = ls.kv.Resized(newCap, s.pos)
		}
	}
	s.kvCap = newCap
	return nil
}

// FillSynthetic makes the sequence n tokens long by writing random key and
// value rows (unit normal, keys as k_norm leaves them; a few dozen distinct
// rows in a fixed order) into every KV cache
// in its width, growing it as a prefill would. The Gated DeltaNet state is
// left as it is. It stands in for a long prefill when measuring the memory
// and the attention cost of a long context; the logits that follow mean
// nothing.
func (s *State) FillSynthetic(n int, seed uint64) error {
	if n < s.pos {
		return fmt.Errorf("qwen35: FillSynthetic: %d tokens is shorter than the %d already held", n, s.pos)
	}
	if err := s.growKV(n); err != nil {
		return err
	}
	// A few dozen random rows, reused: their content does not matter to
	// what this measures, and drawing 2·n rows of normals would take longer
	// than the measurement.
	const distinct = 61
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	row := s.model.cfg.kvDim()
	rows := make([]float32, distinct*row)
	for j := range rows {
		rows[j] = float32(rng.NormFloat64())
	}
	at := func(i int) []float32 { return rows[(i%distinct)*row : (i%distinct+1)*row] }
	for i := range s.layers {
		kv := s.layers[i].kv
		if kv == nil {
			continue
		}
		for p := s.pos; p < n; p++ {
			kv.PutKV(p, at(p+i), at(7*p+i+1))
		}
	}
	s.pos = n
	return nil
}

// KVBytes is the memory the KV caches hold now (their capacity, not just
// the tokens written).
func (s *State) KVBytes() int64 {
	var n int64
	for _, ls := range s.layers {
		if ls.kv != nil {
			n += ls.kv.Bytes()
		}
	}
	return n
}
