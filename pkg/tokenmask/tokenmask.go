// Package tokenmask holds what the constrained decoders (jsonconstrain,
// toolconstrain) share: a trie of a vocabulary's token bytes, which lets one
// walk from a parser state find every token it accepts, and the masking of
// a row of logits by a bitset of allowed ids.
package tokenmask

import (
	"bytes"
	"math"
	"math/bits"
	"slices"
)

// Token is one vocabulary entry: its bytes and its id.
type Token struct {
	Bytes []byte
	ID    int32
}

// Trie: node i has edges EdgeByte/EdgeNode[EdgeLo[i]:EdgeLo[i+1]]; the
// tokens of its subtree are IDs[subLo[i]:subHi[i]], those that end at it the
// first of them (see Own). Nodes are numbered in preorder; node 0 is the
// root.
type Trie struct {
	EdgeLo   []int32
	EdgeByte []byte
	EdgeNode []int32
	IDs      []int32

	subLo, subHi []int32
}

// NewTrie builds the trie of toks, sorting toks in place.
func NewTrie(toks []Token) Trie {
	slices.SortFunc(toks, func(a, b Token) int {
		if c := bytes.Compare(a.Bytes, b.Bytes); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	t := Trie{IDs: make([]int32, len(toks))}
	for i, tk := range toks {
		t.IDs[i] = tk.ID
	}
	t.build(toks, 0, len(toks), 0)
	t.EdgeLo = append(t.EdgeLo, int32(len(t.EdgeByte)))
	return t
}

// build adds the node for the sorted tokens [lo, hi), which share their
// first depth bytes, and its subtree; it returns the node.
func (t *Trie) build(toks []Token, lo, hi, depth int) int32 {
	self := int32(len(t.subLo))
	t.subLo = append(t.subLo, int32(lo))
	t.subHi = append(t.subHi, int32(hi))
	for lo < hi && len(toks[lo].Bytes) == depth {
		lo++
	}
	// A node's edges are contiguous, so reserve them before the children.
	t.EdgeLo = append(t.EdgeLo, int32(len(t.EdgeByte)))
	first := len(t.EdgeByte)
	var bounds []int
	for i := lo; i < hi; {
		j := i + 1
		for j < hi && toks[j].Bytes[depth] == toks[i].Bytes[depth] {
			j++
		}
		t.EdgeByte = append(t.EdgeByte, toks[i].Bytes[depth])
		t.EdgeNode = append(t.EdgeNode, 0)
		bounds = append(bounds, i)
		i = j
	}
	bounds = append(bounds, hi)
	for k := 0; k+1 < len(bounds); k++ {
		t.EdgeNode[first+k] = t.build(toks, bounds[k], bounds[k+1], depth+1)
	}
	return self
}

// ownHi is where node n's own tokens end: preorder numbering puts them
// between the node's start and its first child's.
func (t *Trie) ownHi(n int32) int32 {
	if e := t.EdgeLo[n]; e < t.EdgeLo[n+1] {
		return t.subLo[t.EdgeNode[e]]
	}
	return t.subHi[n]
}

// Own are the tokens that end at node n.
func (t *Trie) Own(n int32) []int32 { return t.IDs[t.subLo[n]:t.ownHi(n)] }

// Below are the tokens of node n's subtree that are longer than n's bytes.
func (t *Trie) Below(n int32) []int32 { return t.IDs[t.ownHi(n):t.subHi[n]] }

// Subtree are the tokens whose bytes start with node n's.
func (t *Trie) Subtree(n int32) []int32 { return t.IDs[t.subLo[n]:t.subHi[n]] }

// Scratch is the reusable space of Apply; the zero value is ready. Keep one
// per generation.
type Scratch struct {
	kept []keptLogit
}

type keptLogit struct {
	id    int32
	logit float32
}

// Apply sets to -Inf, in place, the logits of the ids not set in allowed (a
// bitset, id i at allowed[i/64] bit i%64); logits past the bitset
// (embedding padding rows) are masked too. It goes a 64-id word at a time.
// An allowed word is skipped; in a word mostly allowed only the refused ids
// are visited; a run of words mostly refused (most of a row outside
// strings) is filled by copying and its few allowed logits put back.
func (s *Scratch) Apply(allowed []uint64, logits []float32) {
	for lo := 0; lo < len(logits); {
		w := word(allowed, lo/64)
		switch {
		case w == ^uint64(0):
			lo += 64
		case bits.OnesCount64(w) > 32:
			seg := logits[lo:min(lo+64, len(logits))]
			refused := ^w
			if len(seg) < 64 {
				refused &= 1<<len(seg) - 1
			}
			for ; refused != 0; refused &= refused - 1 {
				seg[bits.TrailingZeros64(refused)] = negInf[0]
			}
			lo += 64
		default:
			lo = s.fillSparse(allowed, logits, lo)
		}
	}
}

// fillSparse masks the run of mostly refused words from logits[lo] and
// returns where the run ends.
func (s *Scratch) fillSparse(allowed []uint64, logits []float32, lo int) int {
	kept := s.kept[:0]
	hi := lo
	for ; hi < len(logits); hi += 64 {
		w := word(allowed, hi/64)
		if bits.OnesCount64(w) > 32 {
			break
		}
		for ; w != 0; w &= w - 1 {
			if i := hi + bits.TrailingZeros64(w); i < len(logits) {
				kept = append(kept, keptLogit{int32(i), logits[i]})
			}
		}
	}
	hi = min(hi, len(logits))
	for x := logits[lo:hi]; len(x) > 0; {
		x = x[copy(x, negInf[:]):]
	}
	for _, k := range kept {
		logits[k.id] = k.logit
	}
	s.kept = kept
	return hi
}

// word is the bitset's word i; ids past it are refused.
func word(allowed []uint64, i int) uint64 {
	if i < len(allowed) {
		return allowed[i]
	}
	return 0
}

// negInf is a block of -Inf copied over refused runs of logits.
var negInf = func() *[1024]float32 {
	var b [1024]float32
	for i := range b {
		b[i] = float32(math.Inf(-1))
	}
	return &b
}()
