package toolconstrain

import (
	"sort"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
)

// The machine reads the output a byte at a time. Its state is a small
// value (a JSON value's automaton aside), so the masker can try every
// branch of the vocabulary trie from one state by copying it.

type phase uint8

const (
	pText      phase = iota // free text; k: progress on "<tool_call>"
	pLit                    // the literal lits[lit]; pos bytes of it read
	pChoice                 // one of the literals of set, [lo,hi) still possible; pos read
	pRaw                    // a raw value; k: the rawAC state (with a pattern, the rawPattern state)
	pJSON                   // a JSON value in json; k: progress on "</parameter>"
	pAfterCall              // after </tool_call>: whitespace, another call, or the end
)

// Literal sets of pChoice.
type litSet uint8

const (
	sFuncs    litSet = iota // NAME>\n of each tool
	sParams                 // P>\n of each parameter of the tool not yet written
	sEnum                   // VALUE\n</parameter>\n of each enum value
	sBody                   // what may follow a call's name or a parameter
	sJSONTail               // what closes a JSON value
)

// Literals of pLit, and what each leads to.
const (
	litOpenRest = iota // after <tool_call> in text
	litFunction        // the forced start after "<tool_call>\n"
	litNewline         // after a raw value's "\n</parameter>"
	litNextCall        // after </tool_call> and whitespace
)

var fixedLits = [...]string{
	litOpenRest: "\n<function=",
	litFunction: "<function=",
	litNewline:  "\n",
	litNextCall: "<tool_call>\n<function=",
}

// bodyLits: close the call (once every required parameter is written) or
// open a parameter (while one is left), sorted.
var bodyLits = []string{"</function>\n</tool_call>", "<parameter="}

const (
	bodyClose = 0
	bodyParam = 1
)

// jsonTailLits close a JSON value: its trailing whitespace may have taken
// the newline the template writes before </parameter>.
var jsonTailLits = []string{"\n</parameter>\n", "</parameter>\n"}

// maxSpaceAfterCall bounds the whitespace between calls and before the end.
const maxSpaceAfterCall = 4

type state struct {
	ph          phase
	set         litSet
	lit         uint8
	ws          uint8
	lo, hi, pos int32
	k           int32
	tool, param int32
	used        uint64
	json        *jsonconstrain.State
	// A bounded raw value: its characters so far (the newline that opens
	// the value aside), and the continuation bytes its last character
	// still needs, the next one in [lo8, hi8].
	count          int32
	need, lo8, hi8 uint8
}

// machine is what a constraint's steps need beyond the state.
type machine struct {
	g        *Grammar
	none     bool // tool_choice none: <tool_call> may not be written
	parallel bool // another call may follow one
}

func (m *machine) lits(st *state) []string {
	switch st.set {
	case sFuncs:
		return m.g.lits
	case sParams:
		return m.g.tools[st.tool].lits
	case sEnum:
		return m.g.tools[st.tool].params[st.param].enum
	case sBody:
		return bodyLits
	}
	return jsonTailLits
}

// open reports whether some literal of [lo,hi) may still be taken.
func (m *machine) open(st *state, lo, hi int32) bool {
	switch st.set {
	case sParams:
		for i := lo; i < hi; i++ {
			if st.used&(1<<i) == 0 {
				return true
			}
		}
		return false
	case sBody:
		t := &m.g.tools[st.tool]
		for i := lo; i < hi; i++ {
			switch i {
			case bodyClose:
				if t.required&^st.used == 0 {
					return true
				}
			case bodyParam:
				if st.used != 1<<len(t.params)-1 {
					return true
				}
			}
		}
		return false
	}
	return true
}

func (m *machine) choose(st *state, set litSet) {
	st.ph, st.set, st.pos, st.lo = pChoice, set, 0, 0
	st.hi = int32(len(m.lits(st)))
}

func (m *machine) literal(st *state, lit int) {
	st.ph, st.lit, st.pos = pLit, uint8(lit), 0
}

// step advances st over b; false when no well-formed output continues with
// b (st is then garbage). A JSON value's automaton is changed in place.
func (m *machine) step(st *state, b byte) bool {
	switch st.ph {
	case pText:
		st.k = callKMP.next(st.k, b)
		if int(st.k) == len(openCall) {
			if m.none {
				return false
			}
			m.literal(st, litOpenRest)
		}
		return true
	case pLit:
		l := fixedLits[st.lit]
		if l[st.pos] != b {
			return false
		}
		if st.pos++; int(st.pos) < len(l) {
			return true
		}
		switch st.lit {
		case litNewline:
			m.choose(st, sBody)
		default:
			m.choose(st, sFuncs)
		}
		return true
	case pChoice:
		return m.stepChoice(st, b)
	case pRaw:
		p := &m.g.tools[st.tool].params[st.param]
		if p.pat != nil {
			closed, ok := p.pat.step(st, b)
			if closed {
				m.literal(st, litNewline)
			}
			return ok
		}
		bounded := p.bounded()
		if bounded && !st.utf8(b) {
			return false
		}
		st.k = int32(rawAC.next[st.k][b])
		switch rawAC.out[st.k] {
		case acForbidden:
			return false
		case acEnd:
			if bounded {
				// The closing "\n</parameter>" was counted; the value is
				// what precedes it (for an empty value, the opening
				// newline doubles as the closing one).
				n := st.count - min(int32(len(rawEnd)), st.count)
				if n < p.minLen || p.maxLen >= 0 && n > p.maxLen {
					return false
				}
			}
			m.literal(st, litNewline)
		default:
			// Characters that may still turn out to be the closing tag
			// are not counted against maxLength yet.
			if bounded && p.maxLen >= 0 && st.count-st.pending() > p.maxLen {
				return false
			}
		}
		return true
	case pJSON:
		if st.k = paramKMP.next(st.k, b); int(st.k) == len(paramKMP.pat) {
			return false
		}
		return st.json.Accept(b)
	case pAfterCall:
		switch {
		case isSpace(b) && st.ws < maxSpaceAfterCall:
			st.ws++
			return true
		case b == '<' && m.parallel:
			m.literal(st, litNextCall)
			st.pos = 1
			return true
		}
	}
	return false
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

func (m *machine) stepChoice(st *state, b byte) bool {
	lits := m.lits(st)
	pos := int(st.pos)
	sub := lits[st.lo:st.hi]
	lo := st.lo + int32(sort.Search(len(sub), func(i int) bool { return len(sub[i]) > pos && sub[i][pos] >= b }))
	hi := st.lo + int32(sort.Search(len(sub), func(i int) bool { return len(sub[i]) > pos && sub[i][pos] > b }))
	if lo >= hi || lits[lo][pos] != b || !m.open(st, lo, hi) {
		return false
	}
	st.lo, st.hi, st.pos = lo, hi, st.pos+1
	if int(st.pos) < len(lits[lo]) {
		return true
	}
	// The literals are prefix-free, so a complete one is the only one left.
	switch i := lo; st.set {
	case sFuncs:
		st.tool, st.used = i, 0
		m.choose(st, sBody)
	case sParams:
		st.param = i
		st.used |= 1 << i
		m.startValue(st)
	case sEnum, sJSONTail:
		m.choose(st, sBody)
	case sBody:
		if i == bodyClose {
			*st = state{ph: pAfterCall}
		} else {
			m.choose(st, sParams)
		}
	}
	return true
}

func (m *machine) startValue(st *state) {
	p := &m.g.tools[st.tool].params[st.param]
	switch p.kind {
	case vEnum:
		m.choose(st, sEnum)
	case vJSON:
		st.ph, st.k, st.json = pJSON, 0, p.schema.Start()
	default:
		st.ph, st.k, st.count, st.need = pRaw, int32(rawAC.start), 0, 0
		if p.pat != nil {
			st.k = p.pat.start
		}
	}
}

// pending is how many of the characters counted are a prefix of the
// closing "\n</parameter>" in progress.
func (st *state) pending() int32 { return min(int32(rawAC.endDepth[st.k]), st.count) }

// utf8 reads b as UTF-8, counting the characters it starts.
func (st *state) utf8(b byte) bool {
	if st.need > 0 {
		if b < st.lo8 || b > st.hi8 {
			return false
		}
		st.need--
		st.lo8, st.hi8 = 0x80, 0xBF
		return true
	}
	switch {
	case b < 0x80:
		st.need = 0
	case b >= 0xC2 && b <= 0xDF:
		st.need, st.lo8, st.hi8 = 1, 0x80, 0xBF
	case b == 0xE0:
		st.need, st.lo8, st.hi8 = 2, 0xA0, 0xBF
	case b == 0xED:
		st.need, st.lo8, st.hi8 = 2, 0x80, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		st.need, st.lo8, st.hi8 = 2, 0x80, 0xBF
	case b == 0xF0:
		st.need, st.lo8, st.hi8 = 3, 0x90, 0xBF
	case b >= 0xF1 && b <= 0xF3:
		st.need, st.lo8, st.hi8 = 3, 0x80, 0xBF
	case b == 0xF4:
		st.need, st.lo8, st.hi8 = 3, 0x80, 0x8F
	default:
		return false
	}
	st.count++
	return true
}

// ended reports whether the output may end here.
func (st *state) ended(forced bool) bool {
	return st.ph == pAfterCall || st.ph == pText && !forced
}

// kmp matches one pattern in a byte stream.
type kmp struct {
	pat  string
	next func(k int32, b byte) int32
}

func newKMP(pat string) kmp {
	fail := make([]int32, len(pat)+1)
	fail[0] = -1
	for i := 1; i <= len(pat); i++ {
		k := fail[i-1]
		for k >= 0 && pat[k] != pat[i-1] {
			k = fail[k]
		}
		fail[i] = k + 1
	}
	// A dense table: states 0..len(pat) by 256 bytes.
	tab := make([][256]int32, len(pat)+1)
	for s := range tab {
		for b := 0; b < 256; b++ {
			k := int32(s)
			if k == int32(len(pat)) {
				k = fail[k]
			}
			for k >= 0 && pat[k] != byte(b) {
				k = fail[k]
			}
			tab[s][b] = k + 1
		}
	}
	return kmp{pat: pat, next: func(k int32, b byte) int32 { return tab[k][b] }}
}

var (
	callKMP  = newKMP(openCall)
	paramKMP = newKMP("</parameter>")
)

// rawAC matches, in a raw value, the closing "\n</parameter>" and the
// markup chatparse would take for the end of the value: "</parameter>"
// elsewhere, and "<parameter=", "</function>" or "</tool_call>" at the
// start of a line. The value starts at the start of a line.
var rawAC = newAC(rawEnd, []string{"</parameter>", "\n<parameter=", "\n</function>", "\n</tool_call>"})

const rawEnd = "\n</parameter>"

const (
	acNone = iota
	acEnd
	acForbidden
)

type ac struct {
	next  [][256]int32
	out   []uint8
	start int32 // after the newline that opens the value
	// endDepth[s]: the length of s's text when it is a prefix of the end
	// pattern, else 0.
	endDepth []uint8
}

func newAC(end string, forbidden []string) *ac {
	type node struct {
		child map[byte]int32
		out   uint8
	}
	nodes := []node{{child: map[byte]int32{}}}
	add := func(p string, out uint8) {
		s := int32(0)
		for i := 0; i < len(p); i++ {
			c, ok := nodes[s].child[p[i]]
			if !ok {
				c = int32(len(nodes))
				nodes = append(nodes, node{child: map[byte]int32{}})
				nodes[s].child[p[i]] = c
			}
			s = c
		}
		nodes[s].out = max(nodes[s].out, out)
	}
	add(end, acEnd)
	for _, p := range forbidden {
		add(p, acForbidden)
	}
	a := &ac{next: make([][256]int32, len(nodes)), out: make([]uint8, len(nodes)), endDepth: make([]uint8, len(nodes))}
	for s, i := int32(0), 0; i < len(end); i++ {
		s = nodes[s].child[end[i]]
		a.endDepth[s] = uint8(i + 1)
	}
	fail := make([]int32, len(nodes))
	queue := []int32{}
	for b := 0; b < 256; b++ {
		if c, ok := nodes[0].child[byte(b)]; ok {
			a.next[0][b] = c
			queue = append(queue, c)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		// The exact end pattern outranks the forbidden ones it contains.
		a.out[s] = nodes[s].out
		if a.out[s] == acNone {
			a.out[s] = a.out[fail[s]]
		}
		for b := 0; b < 256; b++ {
			if c, ok := nodes[s].child[byte(b)]; ok {
				fail[c] = a.next[fail[s]][b]
				a.next[s][b] = c
				queue = append(queue, c)
			} else {
				a.next[s][b] = a.next[fail[s]][b]
			}
		}
	}
	a.start = a.next[0]['\n']
	return a
}
