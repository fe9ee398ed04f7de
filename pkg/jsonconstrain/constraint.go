package jsonconstrain

import "math/bits"

// Constraint drives one constrained generation over a Masker's vocabulary:
// before each token Mask removes what cannot continue the document, after
// it Advance moves the automaton over the token that was picked. It
// implements the runtime's generation hook (runtime.Constraint). A
// Constraint belongs to one generation; the Masker behind it is shared.
type Constraint struct {
	m  *Masker
	st *State
	mk Mask
}

// Constrain starts a generation of a document of s.
func (m *Masker) Constrain(s *Schema) *Constraint {
	return &Constraint{m: m, st: s.Start()}
}

// Mask sets the logits of the tokens that cannot come next to -Inf and
// returns how many tokens stay allowed. End tokens are allowed only once
// the document is complete, and once its top-level value has closed they
// are the only tokens allowed: trailing whitespace would only delay the
// end. 0 means a dead end (a vocabulary that cannot spell what the
// document needs, or no end token to finish it); the caller must stop.
func (c *Constraint) Mask(logits []float32) int {
	if c.st.Closed() {
		c.mk.only(c.m.vocab, c.m.end)
	} else {
		c.m.Allowed(c.st, &c.mk)
	}
	c.mk.Apply(logits)
	return c.mk.countBelow(len(logits))
}

// Advance moves past token id, which Mask must have allowed; ended reports
// an end token after a complete document.
func (c *Constraint) Advance(id int) (ended bool, err error) { return c.m.Accept(c.st, id) }

// Done reports whether the text accepted so far is a complete document.
func (c *Constraint) Done() bool { return c.st.Done() }

// only makes mk the set ids, over a vocabulary of vocab ids.
func (mk *Mask) only(vocab int, ids []int) {
	words := (vocab + 63) / 64
	if cap(mk.bits) < words {
		mk.bits = make([]uint64, words)
	}
	mk.bits = mk.bits[:words]
	clear(mk.bits)
	for _, id := range ids {
		mk.bits[id/64] |= 1 << (id % 64)
	}
}

// countBelow is the number of allowed ids under n.
func (mk *Mask) countBelow(n int) int {
	c := 0
	for i, w := range mk.bits {
		if i*64 >= n {
			break
		}
		if rest := n - i*64; rest < 64 {
			w &= 1<<rest - 1
		}
		c += bits.OnesCount64(w)
	}
	return c
}
