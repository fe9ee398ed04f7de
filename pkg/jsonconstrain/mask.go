package jsonconstrain

import (
	"fmt"
	"math/bits"
	"sync"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/tokenmask"
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
//
// Inside a string or an object key nearly every token fits, and walking
// the whole trie there costs tens of milliseconds on a 248k vocabulary. So
// tokens of plain text (complete UTF-8, no quote, backslash or control
// byte) are also kept as bitsets by character count: from a string with
// room for c more characters, all plain tokens of at most c characters fit
// without a walk, and only the trie of the other tokens is walked.
type Masker struct {
	vocab int // ids 0..vocab-1; logits past it are always masked

	all  tokenmask.Trie // every token but special ones
	rest tokenmask.Trie // tokens not in plainUpTo

	// plainUpTo[c] has the plain tokens of 1..c characters, c <= plainChars.
	plainUpTo     [][]uint64
	plainMaxBytes int // bytes of the longest token in plainUpTo

	end        []int // end-of-turn ids, allowed only when a document is complete
	isEnd      map[int]bool
	vocabulary Vocabulary

	// patternPlain caches, per state of a pattern's DFA, the plain tokens
	// (of up to plainChars characters) it accepts, so a patterned string
	// walks only the rest trie, as an unpatterned one does.
	patternMu    sync.Mutex
	patternPlain map[patternState][]uint64
}

type patternState struct {
	d     *stringDFA
	state int32
}

// maxPatternPlain bounds the cached bitsets (31 KB each at a 248k
// vocabulary); past it the cache starts again.
const maxPatternPlain = 512

// plainChars bounds the plain tokens kept as bitsets; longer ones (rare)
// are walked.
const plainChars = 16

// NewMasker builds the tries of v's tokens. Special tokens are left out,
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
	words := (m.vocab + 63) / 64
	m.plainUpTo = make([][]uint64, plainChars+1)
	for c := range m.plainUpTo {
		m.plainUpTo[c] = make([]uint64, words)
	}
	var all, rest []tokenmask.Token
	for id := 0; id < m.vocab; id++ {
		b := v.TokenBytes(id)
		if v.IsSpecial(id) || m.isEnd[id] || len(b) == 0 {
			continue
		}
		all = append(all, tokenmask.Token{Bytes: b, ID: int32(id)})
		if c := plainCharCount(b); c > 0 && c <= plainChars {
			for k := c; k <= plainChars; k++ {
				m.plainUpTo[k][id/64] |= 1 << (id % 64)
			}
			m.plainMaxBytes = max(m.plainMaxBytes, len(b))
		} else {
			rest = append(rest, tokenmask.Token{Bytes: b, ID: int32(id)})
		}
	}
	m.all = tokenmask.NewTrie(all)
	m.rest = tokenmask.NewTrie(rest)
	return m, nil
}

// plainCharCount is the number of characters of b when b is plain text a
// string or key can hold as is, else 0.
func plainCharCount(b []byte) int {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' {
			return 0
		}
	}
	if !utf8.Valid(b) {
		return 0
	}
	return utf8.RuneCount(b)
}

// Mask is the set of token ids allowed at one step, with the scratch space
// to compute it; reuse one per generation.
type Mask struct {
	bits    []uint64
	m       machine
	scratch tokenmask.Scratch // Apply's
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
func (mk *Mask) Apply(logits []float32) { mk.scratch.Apply(mk.bits, logits) }

// Allowed fills mk with the tokens whose bytes st can accept in full, plus
// the end tokens when st is a complete document. st is not changed.
func (m *Masker) Allowed(st *State, mk *Mask) {
	words := (m.vocab + 63) / 64
	if cap(mk.bits) < words {
		mk.bits = make([]uint64, words)
	}
	mk.bits = mk.bits[:words]
	mk.m.opts = st.m.opts
	top := st.m.compactInto(&mk.m, st.top)
	if c, ok := m.plainRoom(&mk.m, top); ok {
		copy(mk.bits, m.plainUpTo[c])
		walk(&m.rest, mk, 0, top)
	} else if plain := m.patternRoom(mk, top); plain != nil {
		copy(mk.bits, plain)
		walk(&m.rest, mk, 0, top)
	} else {
		clear(mk.bits)
		walk(&m.all, mk, 0, top)
	}
	if st.Done() {
		for _, id := range m.end {
			mk.bits[id/64] |= 1 << (id % 64)
		}
	}
}

// plainRoom reports whether the state top accepts every plain token of up
// to c characters, with no walk: inside a string (between characters) or
// an object key that may be any key.
func (m *Masker) plainRoom(mc *machine, top int32) (c int, ok bool) {
	fr := &mc.f[top]
	if fr.need > 0 {
		return 0, false
	}
	switch {
	case fr.kind == kString && fr.phase == sNormal && fr.node.pat == nil:
		return min(fr.node.maxLen-int(fr.lo), plainChars), true
	case fr.kind == kObject && fr.phase == oKey:
		n := fr.node
		roomy := int(fr.pos)+m.plainMaxBytes <= mc.opts.MaxKeyBytes
		return plainChars, roomy && n.extra != nil && int(fr.extra) < n.maxExtra
	}
	return 0, false
}

// patternRoom returns the plain tokens a patterned string accepts at the
// state top, or nil when top is not between characters of one or the
// string is too near maxLength. Far enough from it (room for plainChars
// characters and the longest shortest finish), which plain tokens fit
// depends only on the DFA's state, so the bitset is cached by it.
func (m *Masker) patternRoom(mk *Mask, top int32) []uint64 {
	fr := &mk.m.f[top]
	if fr.kind != kString || fr.phase != sNormal || fr.need > 0 || fr.node.pat == nil {
		return nil
	}
	d := fr.node.pat
	if fr.node.maxLen-int(fr.lo) < plainChars+int(d.maxDist) {
		return nil
	}
	key := patternState{d, fr.extra}
	m.patternMu.Lock()
	plain, ok := m.patternPlain[key]
	m.patternMu.Unlock()
	if ok {
		return plain
	}
	clear(mk.bits)
	walk(&m.all, mk, 0, top)
	plain = make([]uint64, len(mk.bits))
	for i, w := range mk.bits {
		plain[i] = w & m.plainUpTo[plainChars][i]
	}
	m.patternMu.Lock()
	if m.patternPlain == nil || len(m.patternPlain) >= maxPatternPlain {
		m.patternPlain = map[patternState][]uint64{}
	}
	m.patternPlain[key] = plain
	m.patternMu.Unlock()
	return plain
}

// walk marks every token below node n of t reachable from the state top.
func walk(t *tokenmask.Trie, mk *Mask, n, top int32) {
	for e := t.EdgeLo[n]; e < t.EdgeLo[n+1]; e++ {
		mark := len(mk.m.f)
		if s := mk.m.step(top, t.EdgeByte[e]); s >= 0 {
			child := t.EdgeNode[e]
			for _, id := range t.Own(child) {
				mk.bits[id/64] |= 1 << (id % 64)
			}
			walk(t, mk, child, s)
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
