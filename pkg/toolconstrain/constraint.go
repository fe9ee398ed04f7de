package toolconstrain

import (
	"fmt"
	"math"
	"math/bits"
	"sort"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/tokenmask"
)

// Choice is the request's tool_choice.
type Choice int

const (
	Auto     Choice = iota // free text, and well-formed calls once one opens
	None                   // no call: <tool_call> cannot be written
	Required               // the reply is calls; the prompt ends with "<tool_call>\n"
	Named                  // a call of Plan.Name; the prompt ends with "<tool_call>\n<function=NAME>\n"
)

// Plan is what one generation is constrained to.
type Plan struct {
	Grammar  *Grammar
	Choice   Choice
	Name     string // Named: the function
	Parallel bool   // false: nothing but the end after the first call
}

// Constraint drives one generation (runtime.Constraint): Mask before each
// token, Advance after it. It is not safe for concurrent use.
type Constraint struct {
	v       *Vocab
	m       machine
	forced  bool
	st      state
	bits    []uint64
	jmk     jsonconstrain.Mask
	scratch tokenmask.Scratch
	// idle[k]: in free text at progress k on "<tool_call>", whether every
	// token is allowed (0: not known yet, 1: yes, -1: no).
	idle []int8
}

// Constrain starts a generation under p. The prompt must end where p's
// Choice says (for Required and Named, after the opening the server
// forced).
func (tv *Vocab) Constrain(p Plan) (*Constraint, error) {
	if p.Grammar == nil {
		return nil, fmt.Errorf("toolconstrain: no tools")
	}
	c := &Constraint{v: tv, m: machine{g: p.Grammar, none: p.Choice == None, parallel: p.Parallel},
		forced: p.Choice == Required || p.Choice == Named, bits: make([]uint64, tv.words())}
	switch p.Choice {
	case Required:
		c.m.literal(&c.st, litFunction)
	case Named:
		i := p.Grammar.toolIndex(p.Name)
		if i < 0 {
			return nil, fmt.Errorf("toolconstrain: tool_choice names %q, which is not among the tools the format can carry", p.Name)
		}
		c.st.tool = int32(i)
		c.m.choose(&c.st, sBody)
	}
	return c, nil
}

// Idle reports whether Mask would allow every token now: free text where
// no token could open a call the grammar refuses (runtime.IdleConstraint,
// so a device keeps sampling the row where it is until a call opens).
func (c *Constraint) Idle() bool {
	if c.st.ph != pText {
		return false
	}
	k := c.st.k
	if c.idle == nil {
		c.idle = make([]int8, len(c.v.openers))
	}
	if c.idle[k] == 0 {
		c.idle[k] = 1
		var open state
		c.m.literal(&open, litOpenRest)
		for _, ct := range c.v.openers[k] {
			if c.m.none || !c.sim(open, c.v.v.TokenBytes(int(ct.id))[ct.off:]) {
				c.idle[k] = -1
				break
			}
		}
	}
	return c.idle[k] > 0
}

// Mask sets the logits of the tokens that cannot come next to -Inf and
// returns how many stay allowed. Logits past the vocabulary (embedding
// padding) are masked.
func (c *Constraint) Mask(logits []float32) int {
	st := &c.st
	if st.ph == pText {
		return c.maskText(logits)
	}
	switch st.ph {
	case pRaw:
		if p := &c.m.g.tools[st.tool].params[st.param]; p.pat != nil {
			c.maskPattern(p.pat)
			break
		}
		t := c.v.rawTable(st.k)
		if p := &c.m.g.tools[st.tool].params[st.param]; p.bounded() {
			c.maskBounded(t, p)
			break
		}
		copy(c.bits, t.stay)
		after := *st
		c.m.literal(&after, litNewline)
		for _, ct := range t.close {
			if c.sim(after, c.v.v.TokenBytes(int(ct.id))[ct.off:]) {
				c.set(ct.id)
			}
		}
	case pJSON:
		c.v.json.Allowed(st.json, &c.jmk)
		copy(c.bits, c.jmk.Words())
		for _, id := range c.v.ends {
			c.bits[id/64] &^= 1 << (id % 64)
		}
		for i, g := range c.v.guard[st.k] {
			c.bits[i] &^= g
		}
		if st.json.Done() {
			tail := *st
			c.m.choose(&tail, sJSONTail)
			c.walk(0, tail, &tail)
		}
	default:
		clear(c.bits)
		c.walk(0, *st, st)
	}
	if st.ended(c.forced) {
		for _, id := range c.v.ends {
			c.set(int32(id))
		}
	}
	return c.apply(logits)
}

func (c *Constraint) set(id int32) { c.bits[id/64] |= 1 << (id % 64) }

// maskBounded masks a raw value with a length bound: the tokens plain text
// of few enough characters by their count, the rest one by one (those
// that may hold the closing tag, or continue one in progress, whose
// characters may not count).
func (c *Constraint) maskBounded(t *rawTable, p *param) {
	st := &c.st
	clear(c.bits)
	if st.need == 0 {
		r := plainChars
		if p.maxLen >= 0 {
			r = int(min(max(p.maxLen-st.count, 0), plainChars))
		}
		for i, w := range c.v.plainUpTo[r] {
			c.bits[i] = w & t.stay[i]
		}
		if d := int(rawAC.endDepth[st.k]); d > 0 && d < len(rawEnd) {
			if n := c.v.rootChild[rawEnd[d]]; n >= 0 {
				for _, id := range c.v.trie.Subtree(n) {
					c.bits[id/64] &^= 1 << (id % 64)
					c.simSet(id)
				}
			}
		}
	}
	for _, id := range c.v.unplain {
		c.simSet(id)
	}
	for _, ct := range t.close {
		c.simSet(ct.id)
	}
}

// maskPattern masks a raw value with a pattern or format: the tokens its
// cached table keeps open, those within maxLength where it is near, and
// the ones that close the value, read whole.
func (c *Constraint) maskPattern(p *rawPattern) {
	t := c.v.patternTable(p, c.st.k)
	budget := p.maxLen - c.st.count
	switch cut := 0; {
	case p.maxLen < 0 || t.maxNeed <= budget:
		copy(c.bits, t.stay)
	default:
		// Whichever side of the cut is shorter is read token by token.
		cut = sort.Search(len(t.byNeed), func(i int) bool { return t.byNeed[i].need > budget })
		if cut < len(t.byNeed)/2 {
			clear(c.bits)
			for _, e := range t.byNeed[:cut] {
				c.set(e.id)
			}
		} else {
			copy(c.bits, t.stay)
			for _, e := range t.byNeed[cut:] {
				c.bits[e.id/64] &^= 1 << (e.id % 64)
			}
		}
	}
	for _, id := range t.close {
		c.simSet(id)
	}
}

// simSet allows id if the state can read all of it.
func (c *Constraint) simSet(id int32) {
	if c.sim(c.st, c.v.v.TokenBytes(int(id))) {
		c.set(id)
	}
}

// maskText: in free text every token goes, except one that opens a call
// it cannot continue (or any call, with tool_choice none). Free text is
// then exactly what it is without the constraint, embedding padding rows
// past the vocabulary included.
func (c *Constraint) maskText(logits []float32) int {
	allowed := len(logits)
	var open state
	c.m.literal(&open, litOpenRest)
	for _, ct := range c.v.openers[c.st.k] {
		if int(ct.id) >= len(logits) {
			continue
		}
		if c.m.none || !c.sim(open, c.v.v.TokenBytes(int(ct.id))[ct.off:]) {
			logits[ct.id] = float32(math.Inf(-1))
			allowed--
		}
	}
	return allowed
}

// sim reports whether st can read all of b.
func (c *Constraint) sim(st state, b []byte) bool { return c.run(&st, b) }

// run advances st over all of b; false (st then garbage) when it cannot.
func (c *Constraint) run(st *state, b []byte) bool {
	for _, x := range b {
		if !c.m.step(st, x) {
			return false
		}
	}
	return true
}

// walk marks every token below trie node n that st (reached from root
// over the node's bytes) can read. A JSON value's automaton cannot be
// shared between branches, so below the point where one starts each token
// is read again from root on its own.
func (c *Constraint) walk(n int32, st state, root *state) {
	tr := &c.v.trie
	for e := tr.EdgeLo[n]; e < tr.EdgeLo[n+1]; e++ {
		s := st
		if !c.m.step(&s, tr.EdgeByte[e]) {
			continue
		}
		child := tr.EdgeNode[e]
		if s.ph == pJSON {
			for _, id := range tr.Own(child) {
				c.set(id)
			}
			for _, id := range tr.Below(child) {
				if c.sim(*root, c.v.v.TokenBytes(int(id))) {
					c.set(id)
				}
			}
			continue
		}
		for _, id := range tr.Own(child) {
			c.set(id)
		}
		c.walk(child, s, root)
	}
}

// Advance moves past token id, which Mask must have allowed; ended reports
// an end token where the output may end.
func (c *Constraint) Advance(id int) (ended bool, err error) {
	st := &c.st
	if c.v.isEnd[id] {
		if !st.ended(c.forced) {
			return false, fmt.Errorf("toolconstrain: end token %d inside a tool call", id)
		}
		return true, nil
	}
	if id < 0 || id >= c.v.n || c.v.v.IsSpecial(id) {
		if st.ph != pText {
			return false, fmt.Errorf("toolconstrain: special or out-of-vocabulary token %d inside a tool call", id)
		}
		st.k = 0
		return false, nil
	}
	b := c.v.v.TokenBytes(id)
	if st.ph == pJSON {
		if matchEnd(paramKMP, st.k, b) == 0 && st.json.AcceptBytes(b) {
			for _, x := range b {
				st.k = paramKMP.next(st.k, x)
			}
			return false, nil
		}
		if st.json.Done() {
			tail := *st
			c.m.choose(&tail, sJSONTail)
			if c.run(&tail, b) {
				*st = tail
				return false, nil
			}
		}
		return false, fmt.Errorf("toolconstrain: token %d (%q) cannot continue the parameter's JSON value", id, b)
	}
	s := *st
	if !c.run(&s, b) {
		return false, fmt.Errorf("toolconstrain: token %d (%q) cannot continue a well-formed tool call", id, b)
	}
	*st = s
	return false, nil
}

// apply masks logits by c.bits and returns how many stay allowed.
func (c *Constraint) apply(logits []float32) int {
	n := min(len(logits), c.v.n)
	count := 0
	for i, w := range c.bits {
		if rest := n - i*64; rest < 64 {
			if rest <= 0 {
				break
			}
			w &= 1<<rest - 1
		}
		count += bits.OnesCount64(w)
	}
	c.scratch.Apply(c.bits, logits)
	return count
}
