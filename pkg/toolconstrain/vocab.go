package toolconstrain

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
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
	trie  trie

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
	var toks []token
	for id := 0; id < tv.n; id++ {
		if b := v.TokenBytes(id); len(b) > 0 && !v.IsSpecial(id) && !tv.isEnd[id] {
			toks = append(toks, token{b, int32(id)})
		}
	}
	tv.trie = newTrie(toks)
	tv.openers = make([][]cut, len(openCall))
	tv.guard = make([][]uint64, len(paramKMP.pat))
	for k := range tv.guard {
		tv.guard[k] = make([]uint64, tv.words())
	}
	for _, t := range toks {
		for k := range tv.openers {
			if off := matchEnd(callKMP, int32(k), t.bytes); off > 0 {
				tv.openers[k] = append(tv.openers[k], cut{t.id, int32(off)})
			}
		}
		for k := range tv.guard {
			if matchEnd(paramKMP, int32(k), t.bytes) > 0 {
				tv.guard[k][t.id/64] |= 1 << (t.id % 64)
			}
		}
	}
	tv.plainUpTo = make([][]uint64, plainChars+1)
	for c := range tv.plainUpTo {
		tv.plainUpTo[c] = make([]uint64, tv.words())
	}
	for _, t := range toks {
		c := utf8.RuneCount(t.bytes)
		if !utf8.Valid(t.bytes) || bytes.IndexByte(t.bytes, '\n') >= 0 || c > plainChars {
			tv.unplain = append(tv.unplain, t.id)
			continue
		}
		for k := c; k <= plainChars; k++ {
			tv.plainUpTo[k][t.id/64] |= 1 << (t.id % 64)
		}
	}
	for b := range tv.rootChild {
		tv.rootChild[b] = -1
	}
	for e := tv.trie.edgeLo[0]; e < tv.trie.edgeLo[1]; e++ {
		tv.rootChild[tv.trie.edgeByte[e]] = tv.trie.edgeNode[e]
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
	for e := tr.edgeLo[n]; e < tr.edgeLo[n+1]; e++ {
		child := tr.edgeNode[e]
		s2 := int32(rawAC.next[s][tr.edgeByte[e]])
		switch rawAC.out[s2] {
		case acForbidden:
		case acEnd:
			for _, id := range tr.subtree(child) {
				t.close = append(t.close, cut{id, depth + 1})
			}
		default:
			for _, id := range tr.own(child) {
				t.stay[id/64] |= 1 << (id % 64)
			}
			tv.rawWalk(t, child, s2, depth+1)
		}
	}
}

type token struct {
	bytes []byte
	id    int32
}

// trie: node i has edges edgeByte/edgeNode[edgeLo[i]:edgeLo[i+1]]; the
// tokens of its subtree are ids[subLo[i]:subHi[i]], those that end at it
// ids[subLo[i]:ownHi[i]]. Nodes are numbered in preorder.
type trie struct {
	edgeLo              []int32
	edgeByte            []byte
	edgeNode            []int32
	subLo, subHi, ownHi []int32
	ids                 []int32
}

func newTrie(toks []token) trie {
	slices.SortFunc(toks, func(a, b token) int {
		if c := bytes.Compare(a.bytes, b.bytes); c != 0 {
			return c
		}
		return int(a.id - b.id)
	})
	t := trie{ids: make([]int32, len(toks))}
	for i, tk := range toks {
		t.ids[i] = tk.id
	}
	t.build(toks, 0, len(toks), 0)
	t.edgeLo = append(t.edgeLo, int32(len(t.edgeByte)))
	return t
}

func (t *trie) build(toks []token, lo, hi, depth int) int32 {
	self := int32(len(t.subLo))
	t.subLo = append(t.subLo, int32(lo))
	t.subHi = append(t.subHi, int32(hi))
	for lo < hi && len(toks[lo].bytes) == depth {
		lo++
	}
	t.ownHi = append(t.ownHi, int32(lo))
	t.edgeLo = append(t.edgeLo, int32(len(t.edgeByte)))
	first := len(t.edgeByte)
	var bounds []int
	for i := lo; i < hi; {
		j := i + 1
		for j < hi && toks[j].bytes[depth] == toks[i].bytes[depth] {
			j++
		}
		t.edgeByte = append(t.edgeByte, toks[i].bytes[depth])
		t.edgeNode = append(t.edgeNode, 0)
		bounds = append(bounds, i)
		i = j
	}
	bounds = append(bounds, hi)
	for k := 0; k+1 < len(bounds); k++ {
		t.edgeNode[first+k] = t.build(toks, bounds[k], bounds[k+1], depth+1)
	}
	return self
}

func (t *trie) own(n int32) []int32     { return t.ids[t.subLo[n]:t.ownHi[n]] }
func (t *trie) subtree(n int32) []int32 { return t.ids[t.subLo[n]:t.subHi[n]] }
