package jsonconstrain

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"sort"
)

// Vocabulary is what the masker needs of a tokenizer; *tokenizer.Tokenizer
// implements it.
type Vocabulary interface {
	IDCount() int
	TokenBytes(id int) []byte
	IsSpecial(id int) bool
}

// Masker knows which bytes every token of a vocabulary stands for, in a
// trie, so one walk from a state finds every token the state accepts and
// tokens sharing a prefix share its steps. A Masker is immutable and safe
// for concurrent use; each generation keeps its own Mask.
type Masker struct {
	vocab int // ids 0..vocab-1; logits past it are always masked

	// trie: node i has edges edgeByte/edgeNode[edgeLo[i]:edgeLo[i+1]] and
	// ends the tokens ids[idLo[i]:idLo[i+1]].
	edgeLo, idLo []int32
	edgeByte     []byte
	edgeNode     []int32
	ids          []int32

	end        []int // end-of-turn ids, allowed only when a document is complete
	isEnd      map[int]bool
	vocabulary Vocabulary
}

// NewMasker builds the trie of v's tokens. Special tokens are left out,
// except endIDs (such as <|im_end|> and <|endoftext|>), which Allowed admits
// once the document is complete.
func NewMasker(v Vocabulary, endIDs []int) (*Masker, error) {
	m := &Masker{vocab: v.IDCount(), isEnd: map[int]bool{}, vocabulary: v}
	for _, id := range endIDs {
		if id < 0 || id >= m.vocab {
			return nil, fmt.Errorf("jsonconstrain: end token id %d is outside the vocabulary (0..%d)", id, m.vocab-1)
		}
		if !m.isEnd[id] {
			m.end = append(m.end, id)
			m.isEnd[id] = true
		}
	}
	var order []int32
	for id := 0; id < m.vocab; id++ {
		if !v.IsSpecial(id) && !m.isEnd[id] && len(v.TokenBytes(id)) > 0 {
			order = append(order, int32(id))
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		return bytes.Compare(v.TokenBytes(int(order[i])), v.TokenBytes(int(order[j]))) < 0
	})
	tb := func(i int) []byte { return v.TokenBytes(int(order[i])) }
	m.ids = order
	m.build(tb, 0, len(order), 0)
	m.edgeLo = append(m.edgeLo, int32(len(m.edgeByte)))
	m.idLo = append(m.idLo, int32(len(m.ids)))
	return m, nil
}

// build adds the node for the sorted tokens [lo, hi), which share their
// first depth bytes, and its subtree, in preorder; it returns the node.
func (m *Masker) build(tb func(int) []byte, lo, hi, depth int) int32 {
	self := int32(len(m.idLo))
	m.idLo = append(m.idLo, int32(lo))
	for lo < hi && len(tb(lo)) == depth {
		lo++
	}
	m.edgeLo = append(m.edgeLo, 0)
	type group struct{ lo, hi int }
	var groups []group
	for i := lo; i < hi; {
		j := i + 1
		for j < hi && tb(j)[depth] == tb(i)[depth] {
			j++
		}
		groups = append(groups, group{i, j})
		i = j
	}
	// A node's edges are contiguous, so reserve them before the children.
	m.edgeLo[self] = int32(len(m.edgeByte))
	first := len(m.edgeByte)
	for _, g := range groups {
		m.edgeByte = append(m.edgeByte, tb(g.lo)[depth])
		m.edgeNode = append(m.edgeNode, 0)
	}
	for k, g := range groups {
		m.edgeNode[first+k] = m.build(tb, g.lo, g.hi, depth+1)
	}
	return self
}

// nodeIDs are the tokens that end at trie node n. Preorder numbering makes
// them the ids between this node's start and its first child's.
func (m *Masker) nodeIDs(n int32) []int32 {
	lo := m.idLo[n]
	hi := m.idLo[n+1]
	if e := m.edgeLo[n]; e < m.edgeLo[n+1] {
		hi = m.idLo[m.edgeNode[e]]
	}
	return m.ids[lo:hi]
}

// Mask is the set of token ids allowed at one step, with the scratch space
// to compute it; reuse one per generation.
type Mask struct {
	bits []uint64
	m    machine
}

// Allows reports whether id is in the set.
func (mk *Mask) Allows(id int) bool {
	return id >= 0 && id/64 < len(mk.bits) && mk.bits[id/64]&(1<<(id%64)) != 0
}

// Count is the number of allowed ids.
func (mk *Mask) Count() int {
	n := 0
	for _, w := range mk.bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// Apply sets the logits of disallowed ids to -Inf, in place; logits may be
// longer than the vocabulary (embedding padding rows), those are masked.
func (mk *Mask) Apply(logits []float32) {
	inf := float32(math.Inf(-1))
	for i := range logits {
		if !mk.Allows(i) {
			logits[i] = inf
		}
	}
}

// Allowed fills mk with the tokens whose bytes st can accept in full, plus
// the end tokens when st is a complete document. st is not changed.
func (m *Masker) Allowed(st *State, mk *Mask) {
	words := (m.vocab + 63) / 64
	if cap(mk.bits) < words {
		mk.bits = make([]uint64, words)
	}
	mk.bits = mk.bits[:words]
	clear(mk.bits)
	mk.m.opts = st.m.opts
	top := st.m.compactInto(&mk.m, st.top)
	m.walk(mk, 0, top)
	if st.Done() {
		for _, id := range m.end {
			mk.bits[id/64] |= 1 << (id % 64)
		}
	}
}

// walk marks every token below trie node n reachable from the state top.
func (m *Masker) walk(mk *Mask, n, top int32) {
	for e := m.edgeLo[n]; e < m.edgeLo[n+1]; e++ {
		mark := len(mk.m.f)
		if t := mk.m.step(top, m.edgeByte[e]); t >= 0 {
			child := m.edgeNode[e]
			for _, id := range m.nodeIDs(child) {
				mk.bits[id/64] |= 1 << (id % 64)
			}
			m.walk(mk, child, t)
		}
		mk.m.f = mk.m.f[:mark]
	}
}

// Accept advances st over token id, which must be allowed: its bytes must
// continue the document, or it must be an end token after a complete one.
// ended reports an end token; generation stops there.
func (m *Masker) Accept(st *State, id int) (ended bool, err error) {
	if m.isEnd[id] {
		if !st.Done() {
			return false, fmt.Errorf("jsonconstrain: end token %d before the document is complete", id)
		}
		return true, nil
	}
	if id < 0 || id >= m.vocab {
		return false, fmt.Errorf("jsonconstrain: token %d is outside the vocabulary", id)
	}
	if m.vocabulary.IsSpecial(id) {
		return false, fmt.Errorf("jsonconstrain: special token %d inside a document", id)
	}
	b := m.vocabulary.TokenBytes(id)
	if len(b) == 0 || !st.AcceptBytes(b) {
		return false, fmt.Errorf("jsonconstrain: token %d (%q) cannot continue the document", id, b)
	}
	return false, nil
}
