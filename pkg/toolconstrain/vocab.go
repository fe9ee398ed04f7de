package toolconstrain

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/tokenmask"
)

// Vocab is what the constraint precomputes over a vocabulary, once per
// model: a trie of its tokens, and per state of the markup matchers the
// tokens that stay in a value or free text. It is safe for concurrent use;
// each generation has its own Constraint.
type Vocab struct {
	v     jsonconstrain.Vocabulary
	n     int // ids 0..n-1
	ends  []int
	isEnd map[int]bool
	json  *jsonconstrain.Masker
	trie  tokenmask.Trie

	// openers[k]: the tokens that, read from progress k on "<tool_call>",
	// complete it, and where.
	openers [][]cut
	// guard[k]: the tokens that, from progress k on "</parameter>",
	// complete it (a JSON value may not contain it).
	guard [][]uint64

	// plainUpTo[c]: the tokens of 1..c characters (c <= plainChars) of
	// complete UTF-8 without a newline, which a bounded raw value takes by
	// its character count alone; unplain: the others, read one by one.
	plainUpTo [][]uint64
	unplain   []int32
	// rootChild[b]: the trie node of the tokens that start with b, or -1.
	rootChild [256]int32

	rawMu sync.Mutex
	raw   []*rawTable // per rawAC state, built on first use

	patMu     sync.Mutex
	patTables map[patKey]*patTable // bounded by maxPatTables
}

// patKey is a state of a patterned raw value.
type patKey struct {
	p *rawPattern
	s int32
}

// patTable is, for one state of a patterned raw value, the tokens that keep
// it open, each with the characters it and the shortest finish after it
// need (byNeed, ascending), and those that may close it.
type patTable struct {
	stay    []uint64
	byNeed  []idNeed
	maxNeed int32
	close   []int32
}

type idNeed struct{ need, id int32 }

// maxPatTables bounds the cached pattern tables (31 KB each, and their
// lists, at a 248k vocabulary); past it the cache starts again.
const maxPatTables = 512

// patternTable returns the table of state s of p, building it on first use.
func (tv *Vocab) patternTable(p *rawPattern, s int32) *patTable {
	key := patKey{p, s}
	tv.patMu.Lock()
	t := tv.patTables[key]
	tv.patMu.Unlock()
	if t != nil {
		return t
	}
	t = &patTable{stay: make([]uint64, tv.words())}
	tv.patWalk(t, p, 0, s, 0)
	slices.SortFunc(t.byNeed, func(a, b idNeed) int { return cmp.Compare(a.need, b.need) })
	tv.patMu.Lock()
	if tv.patTables == nil || len(tv.patTables) >= maxPatTables {
		tv.patTables = map[patKey]*patTable{}
	}
	tv.patTables[key] = t
	tv.patMu.Unlock()
	return t
}

// patWalk adds the tokens below trie node n, read from state s after cost
// characters. What a token needs only grows along its bytes (dist is the
// fewest characters to the close), so a branch past maxLength is cut.
func (tv *Vocab) patWalk(t *patTable, p *rawPattern, n, s, cost int32) {
	tr := &tv.trie
	for e := tr.EdgeLo[n]; e < tr.EdgeLo[n+1]; e++ {
		child := tr.EdgeNode[e]
		s2, c, ok := p.next(s, tr.EdgeByte[e])
		if !ok {
			continue
		}
		if s2 == patEnd {
			t.close = append(t.close, tr.Subtree(child)...)
			continue
		}
		d := p.dist[s2]
		need := cost + c + d
		if d < 0 || p.maxLen >= 0 && need > p.maxLen {
			continue
		}
		for _, id := range tr.Own(child) {
			t.stay[id/64] |= 1 << (id % 64)
			t.byNeed = append(t.byNeed, idNeed{need, id})
			t.maxNeed = max(t.maxNeed, need)
		}
		tv.patWalk(t, p, child, s2, cost+c)
	}
}

// cut is a token and an offset into its bytes.
type cut struct {
	id  int32
	off int32
}

// rawTable is, for one rawAC state, the tokens that keep a raw value open
// and those that close it (at off; the rest of the token must then fit what
// follows).
type rawTable struct {
	stay  []uint64
	close []cut
}

// NewVocab prepares v for tool-call constraints. ends are the end-of-turn
// ids (allowed where the output may end); jm is the model's JSON masker,
// built with the same ends, which constrains JSON parameter values.
// Special tokens other than ends are never allowed inside a call.
func NewVocab(v jsonconstrain.Vocabulary, ends []int, jm *jsonconstrain.Masker) (*Vocab, error) {
	tv := &Vocab{v: v, n: v.IDCount(), isEnd: map[int]bool{}, json: jm}
	for _, id := range ends {
		if id < 0 || id >= tv.n {
			return nil, fmt.Errorf("toolconstrain: end token id %d is outside the vocabulary (0..%d)", id, tv.n-1)
		}
		if !tv.isEnd[id] {
			tv.isEnd[id] = true
			tv.ends = append(tv.ends, id)
		}
	}
	var toks []tokenmask.Token
	for id := 0; id < tv.n; id++ {
		if b := v.TokenBytes(id); len(b) > 0 && !v.IsSpecial(id) && !tv.isEnd[id] {
			toks = append(toks, tokenmask.Token{Bytes: b, ID: int32(id)})
		}
	}
	tv.trie = tokenmask.NewTrie(toks)
	tv.openers = make([][]cut, len(openCall))
	tv.guard = make([][]uint64, len(paramKMP.pat))
	for k := range tv.guard {
		tv.guard[k] = make([]uint64, tv.words())
	}
	for _, t := range toks {
		for k := range tv.openers {
			if off := matchEnd(callKMP, int32(k), t.Bytes); off > 0 {
				tv.openers[k] = append(tv.openers[k], cut{t.ID, int32(off)})
			}
		}
		for k := range tv.guard {
			if matchEnd(paramKMP, int32(k), t.Bytes) > 0 {
				tv.guard[k][t.ID/64] |= 1 << (t.ID % 64)
			}
		}
	}
	tv.plainUpTo = make([][]uint64, plainChars+1)
	for c := range tv.plainUpTo {
		tv.plainUpTo[c] = make([]uint64, tv.words())
	}
	for _, t := range toks {
		c := utf8.RuneCount(t.Bytes)
		if !utf8.Valid(t.Bytes) || bytes.IndexByte(t.Bytes, '\n') >= 0 || c > plainChars {
			tv.unplain = append(tv.unplain, t.ID)
			continue
		}
		for k := c; k <= plainChars; k++ {
			tv.plainUpTo[k][t.ID/64] |= 1 << (t.ID % 64)
		}
	}
	for b := range tv.rootChild {
		tv.rootChild[b] = -1
	}
	for e := tv.trie.EdgeLo[0]; e < tv.trie.EdgeLo[1]; e++ {
		tv.rootChild[tv.trie.EdgeByte[e]] = tv.trie.EdgeNode[e]
	}
	tv.raw = make([]*rawTable, len(rawAC.out))
	return tv, nil
}

// plainChars bounds the tokens kept in plainUpTo; longer ones are read one
// by one.
const plainChars = 16

func (tv *Vocab) words() int { return (tv.n + 63) / 64 }

// matchEnd is where in b the pattern of km completes, read from progress
// k, or 0.
func matchEnd(km kmp, k int32, b []byte) int {
	for i, c := range b {
		if k = km.next(k, c); int(k) == len(km.pat) {
			return i + 1
		}
	}
	return 0
}

// rawTable returns the table of rawAC state s, building it on first use.
func (tv *Vocab) rawTable(s int32) *rawTable {
	tv.rawMu.Lock()
	defer tv.rawMu.Unlock()
	if t := tv.raw[s]; t != nil {
		return t
	}
	t := &rawTable{stay: make([]uint64, tv.words())}
	tv.rawWalk(t, 0, s, 0)
	tv.raw[s] = t
	return t
}

func (tv *Vocab) rawWalk(t *rawTable, n, s int32, depth int32) {
	tr := &tv.trie
	for e := tr.EdgeLo[n]; e < tr.EdgeLo[n+1]; e++ {
		child := tr.EdgeNode[e]
		s2 := int32(rawAC.next[s][tr.EdgeByte[e]])
		switch rawAC.out[s2] {
		case acForbidden:
		case acEnd:
			for _, id := range tr.Subtree(child) {
				t.close = append(t.close, cut{id, depth + 1})
			}
		default:
			for _, id := range tr.Own(child) {
				t.stay[id/64] |= 1 << (id % 64)
			}
			tv.rawWalk(t, child, s2, depth+1)
		}
	}
}
