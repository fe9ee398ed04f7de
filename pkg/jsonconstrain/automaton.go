package jsonconstrain

import "sort"

// The automaton is a pushdown machine whose stack is a chain of immutable
// frames in an arena: a step never changes a frame, it appends new ones
// (the changed top, or a pushed child) that point at their parent. A state
// is then just the index of its top frame, so the masker can try every
// branch of the vocabulary trie from one state and throw a branch away by
// truncating the arena, without copying stacks.

// frame kinds
const (
	kRoot = iota
	kObject
	kArray
	kString
	kNumber
	kLiteral
)

// phases of kRoot, kObject, kArray and kString frames
const (
	pValue = iota // root: before the value
	pIn           // a child value is on top of this frame
	pAfter        // after a value (root: trailing whitespace only)

	oStart // after '{'
	oKey   // inside a key
	oColon // after a key, before ':'
	oValue // after ':'
	oComma // after ','

	aStart // after '['
	aComma // after ','

	sNormal
	sEscape
	sHex
)

type frame struct {
	node   *node
	parent int32
	kind   uint8
	phase  uint8
	ws     uint8 // whitespace bytes in a row
	depth  uint8 // containers open at this frame, itself included

	// UTF-8 validation inside strings and keys: need continuation bytes
	// are still due, the next one in [lo8, hi8].
	need, lo8, hi8 uint8

	// kLiteral and object keys: the candidates node.lits[lo:hi] (or
	// node.names) share the pos bytes matched so far.
	// kArray: lo counts the elements. kString: lo counts characters,
	// hi the \u digits left, pos their value so far.
	lo, hi, pos int32
	// kObject: extra counts keys not in node.names; cur is the property
	// whose value is being read (-1: an extra key). kString: extra is
	// the state of node.pat.
	// kNumber: extra counts bytes, lo exponent digits.
	extra, cur int32
	seen       uint64 // kObject: bit i set once names[i] has been written
}

type machine struct {
	f    []frame
	opts *Options
}

func (m *machine) push(fr frame) int32 {
	m.f = append(m.f, fr)
	return int32(len(m.f) - 1)
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// space accepts b as one more whitespace byte in fr, if the bound allows.
func (m *machine) space(fr frame) int32 {
	if int(fr.ws) >= m.opts.MaxWhitespace {
		return -1
	}
	fr.ws++
	return m.push(fr)
}

// step returns the state after b, or -1 when b cannot continue any valid
// document.
func (m *machine) step(top int32, b byte) int32 {
	for {
		fr := m.f[top]
		switch fr.kind {
		case kRoot:
			return m.root(fr, b)
		case kObject:
			return m.object(fr, b)
		case kArray:
			return m.array(fr, b)
		case kString:
			return m.str(fr, b)
		case kNumber:
			if t := m.number(fr, b); t >= 0 || !numberDone(fr) {
				return t
			}
		case kLiteral:
			if t := m.literal(fr, b); t >= 0 || len(fr.node.lits[fr.lo]) != int(fr.pos) {
				return t
			}
			if d := m.f[fr.parent].node.disc; d != nil && d.alts != nil && m.f[fr.parent].kind == kObject {
				if top = m.discriminated(fr.parent, d.alts[fr.node.lits[fr.lo]]); top < 0 {
					return -1
				}
				continue
			}
		}
		// A complete number or literal that b does not extend ends before
		// b; its parent reads b.
		if top = m.complete(fr.parent); top < 0 {
			return -1
		}
	}
}

// discriminated switches the object at parent, whose discriminator value
// has just ended, to the schema that value picks: the discriminator is one
// of its properties, already written.
func (m *machine) discriminated(parent int32, alt *node) int32 {
	fr := m.f[parent]
	name := fr.node.names[0]
	i := sort.SearchStrings(alt.names, name)
	fr.node, fr.seen, fr.extra, fr.cur = alt, uint64(1)<<i, 0, int32(i)
	fr.phase, fr.ws = pAfter, 0
	m.dropTooDeep(&fr)
	return m.push(fr)
}

// complete records that the child of the frame at parent has ended.
func (m *machine) complete(parent int32) int32 {
	fr := m.f[parent]
	fr.phase, fr.ws = pAfter, 0
	if fr.kind == kArray {
		fr.lo++
	}
	return m.push(fr)
}

func (m *machine) root(fr frame, b byte) int32 {
	if isSpace(b) {
		return m.space(fr)
	}
	if fr.phase != pValue {
		return -1
	}
	fr.phase, fr.ws = pIn, 0
	return m.startValue(m.push(fr), fr.node, fr.depth, b)
}

// startValue begins a value of n with its first byte b, as the child of
// the frame at parent (already in phase pIn).
func (m *machine) startValue(parent int32, n *node, depth uint8, b byte) int32 {
	for n.union != nil {
		i := n.union.first[b]
		if i == 0 {
			return -1
		}
		n = n.union.alts[i-1]
	}
	if n.lits != nil {
		return m.startLiteral(parent, n, b)
	}
	child := frame{node: n, parent: parent, depth: depth}
	switch {
	case b == '{' && n.types&tObject != 0 && int(depth)+1+int(n.objDeep) <= m.opts.MaxDepth:
		child.kind, child.phase, child.depth, child.cur = kObject, oStart, depth+1, -1
		if n.disc != nil {
			child.node = n.disc.fitting(m.opts.MaxDepth - int(depth) - 1)
		}
		m.dropTooDeep(&child)
	case b == '[' && n.types&tArray != 0 && int(depth)+1+int(n.arrDeep) <= m.opts.MaxDepth:
		child.kind, child.phase, child.depth = kArray, aStart, depth+1
	case b == '"' && n.types&tString != 0:
		child.kind, child.phase = kString, sNormal
	case (b == '-' || b >= '0' && b <= '9') && n.types&(tNumber|tInteger) != 0:
		child.kind = kNumber
		return m.number(child, b)
	case (b == 't' || b == 'f') && n.types&tBoolean != 0:
		return m.startLiteral(parent, boolNode, b)
	case b == 'n' && n.types&tNull != 0:
		return m.startLiteral(parent, nullNode, b)
	default:
		return -1
	}
	return m.push(child)
}

// dropTooDeep rules out, in a new object frame, the optional properties
// (marking them seen) and extra keys (using up their count) whose values
// could not close within MaxDepth; only recursive schemas have any.
func (m *machine) dropTooDeep(fr *frame) {
	n := fr.node
	room := m.opts.MaxDepth - int(fr.depth)
	if int(n.propDeep) <= room {
		return
	}
	for i, p := range n.props {
		if int(p.minDeep) > room {
			fr.seen |= 1 << i
		}
	}
	if n.extra != nil && int(n.extra.minDeep) > room {
		fr.extra = int32(n.maxExtra)
	}
}

// fits reports whether a value of n can start, and close, inside a
// container whose frame has depth depth.
func (m *machine) fits(n *node, depth uint8) bool {
	return n != nil && int(depth)+int(n.minDeep) <= m.opts.MaxDepth
}

func (m *machine) startLiteral(parent int32, n *node, b byte) int32 {
	fr := frame{node: n, parent: parent, kind: kLiteral, hi: int32(len(n.lits))}
	return m.literal(fr, b)
}

func (m *machine) literal(fr frame, b byte) int32 {
	lo, hi := narrow(fr.node.lits, int(fr.lo), int(fr.hi), int(fr.pos), b)
	if lo == hi {
		return -1
	}
	fr.lo, fr.hi, fr.pos = int32(lo), int32(hi), fr.pos+1
	return m.push(fr)
}

// narrow returns the sub-range of the sorted list[lo:hi], whose entries
// share their first pos bytes, that continues with b at pos.
func narrow(list []string, lo, hi, pos int, b byte) (int, int) {
	at := func(i int) int {
		if s := list[lo+i]; len(s) > pos {
			return int(s[pos])
		}
		return -1
	}
	n := hi - lo
	first := lo + sort.Search(n, func(i int) bool { return at(i) >= int(b) })
	last := lo + sort.Search(n, func(i int) bool { return at(i) > int(b) })
	return first, last
}

// utf8Lead classifies a byte that starts a character: how many
// continuation bytes follow and the range of the first of them (which
// excludes overlong forms and surrogates). ok is false for bytes that
// cannot start a character.
func utf8Lead(b byte) (need, lo, hi uint8, ok bool) {
	switch {
	case b < 0x80:
		return 0, 0, 0, true
	case b >= 0xC2 && b <= 0xDF:
		return 1, 0x80, 0xBF, true
	case b == 0xE0:
		return 2, 0xA0, 0xBF, true
	case b == 0xED:
		return 2, 0x80, 0x9F, true
	case b >= 0xE1 && b <= 0xEF:
		return 2, 0x80, 0xBF, true
	case b == 0xF0:
		return 3, 0x90, 0xBF, true
	case b >= 0xF1 && b <= 0xF3:
		return 3, 0x80, 0xBF, true
	case b == 0xF4:
		return 3, 0x80, 0x8F, true
	}
	return 0, 0, 0, false
}

// continuation accepts b as the next continuation byte due in fr.
func continuation(fr *frame, b byte) bool {
	if b < fr.lo8 || b > fr.hi8 {
		return false
	}
	fr.need--
	fr.lo8, fr.hi8 = 0x80, 0xBF
	return true
}

func (m *machine) str(fr frame, b byte) int32 {
	n := fr.node
	// Under a pattern the string's DFA reads every byte but the closing
	// quote (a '"' inside is spelled \"); the checks below still apply.
	if d := n.pat; d != nil {
		between := fr.phase == sNormal && fr.need == 0
		if between && b == '"' {
			if !d.accept[fr.extra] {
				return -1
			}
		} else {
			next := d.step(fr.extra, b)
			chars := fr.lo
			if between {
				chars++
			}
			if next < 0 || int(chars)+int(d.dist[next]) > n.maxLen {
				return -1
			}
			fr.extra = next
		}
	}
	switch fr.phase {
	case sEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			fr.phase = sNormal
		case 'u':
			fr.phase, fr.hi, fr.pos = sHex, 4, 0
		default:
			return -1
		}
		return m.push(fr)
	case sHex:
		v := hexValue(b)
		if v < 0 {
			return -1
		}
		fr.pos, fr.hi = fr.pos<<4|int32(v), fr.hi-1
		// Surrogate escapes are refused (after two digits, while the
		// writer can still choose others) so every escape is one code
		// point; raw UTF-8 can write any character.
		if fr.hi == 2 && fr.pos >= 0xD8 && fr.pos <= 0xDF {
			return -1
		}
		if fr.hi == 0 {
			fr.phase = sNormal
		}
		return m.push(fr)
	}
	if fr.need > 0 {
		if !continuation(&fr, b) {
			return -1
		}
		return m.push(fr)
	}
	switch {
	case b == '"':
		if int(fr.lo) < n.minLen {
			return -1
		}
		return m.complete(fr.parent)
	case b < 0x20 || int(fr.lo) >= n.maxLen:
		return -1
	case b == '\\':
		fr.phase = sEscape
	default:
		need, lo8, hi8, ok := utf8Lead(b)
		if !ok {
			return -1
		}
		fr.need, fr.lo8, fr.hi8 = need, lo8, hi8
	}
	fr.lo++
	return m.push(fr)
}

func hexValue(b byte) int {
	switch {
	case b >= '0' && b <= '9':
		return int(b - '0')
	case b >= 'a' && b <= 'f':
		return int(b-'a') + 10
	case b >= 'A' && b <= 'F':
		return int(b-'A') + 10
	}
	return -1
}

// Number phases follow the JSON grammar; the zero frame has read nothing.
const (
	nStart    = iota
	nMinus    // "-"
	nZero     // "0" or "-0"
	nInt      // [1-9][0-9]*
	nDot      // "."
	nFrac     // fraction digits
	nExp      // "e" or "E"
	nExpSign  // exponent sign
	nExpDigit // exponent digits
)

const maxExponentDigits = 2

func numberComplete(phase uint8) bool {
	return phase == nZero || phase == nInt || phase == nFrac || phase == nExpDigit
}

// numberDone reports whether the number read in fr is complete.
func numberDone(fr frame) bool {
	if d := fr.node.num; d != nil {
		return d.accept[fr.lo]
	}
	return numberComplete(fr.phase)
}

func (m *machine) number(fr frame, b byte) int32 {
	if d := fr.node.num; d != nil {
		// The bounded DFA: fr.lo is its state; it counts bytes itself.
		class := numClass(b)
		if class < 0 {
			return -1
		}
		next := d.next[fr.lo][class]
		if next < 0 {
			return -1
		}
		fr.lo = int32(next)
		return m.push(fr)
	}
	digit := b >= '0' && b <= '9'
	integer := fr.node.types&tNumber == 0
	next := uint8(255)
	switch fr.phase {
	case nStart, nMinus:
		switch {
		case b == '-' && fr.phase == nStart:
			next = nMinus
		case b == '0':
			next = nZero
		case digit:
			next = nInt
		}
	case nZero, nInt:
		switch {
		case digit && fr.phase == nInt:
			next = nInt
		case b == '.' && !integer:
			next = nDot
		case (b == 'e' || b == 'E') && !integer:
			next = nExp
		}
	case nDot, nFrac:
		switch {
		case digit:
			next = nFrac
		case (b == 'e' || b == 'E') && fr.phase == nFrac:
			next = nExp
		}
	case nExp:
		switch {
		case b == '+' || b == '-':
			next = nExpSign
		case digit:
			next = nExpDigit
		}
	case nExpSign, nExpDigit:
		// Two exponent digits keep every number within float64 range, which
		// is what most clients decode numbers into.
		if digit && fr.lo < maxExponentDigits {
			next = nExpDigit
		}
	}
	if next == nExpDigit {
		fr.lo++
	}
	if next == 255 {
		return -1
	}
	// Leave room for the digit an incomplete number still needs.
	room := int(fr.extra) + 1
	if !numberComplete(next) {
		room++
	}
	if room > m.opts.MaxNumberBytes {
		return -1
	}
	fr.phase, fr.extra = next, fr.extra+1
	return m.push(fr)
}

func (m *machine) array(fr frame, b byte) int32 {
	if isSpace(b) && fr.phase != pIn {
		return m.space(fr)
	}
	n := fr.node
	switch fr.phase {
	case aStart:
		if b == ']' && n.minItems == 0 {
			return m.complete(fr.parent)
		}
		if n.maxItems == 0 || !m.fits(n.itemAt(0), fr.depth) {
			return -1
		}
	case aComma:
	case pAfter:
		switch {
		case b == ',' && int(fr.lo) < n.maxItems && m.fits(n.itemAt(int(fr.lo)), fr.depth):
			fr.phase, fr.ws = aComma, 0
			return m.push(fr)
		case b == ']' && int(fr.lo) >= n.minItems:
			return m.complete(fr.parent)
		}
		return -1
	default:
		return -1
	}
	fr.phase, fr.ws = pIn, 0
	return m.startValue(m.push(fr), n.itemAt(int(fr.lo)), fr.depth, b)
}

func (m *machine) object(fr frame, b byte) int32 {
	if fr.phase == oKey {
		return m.key(fr, b)
	}
	if isSpace(b) && fr.phase != pIn {
		return m.space(fr)
	}
	n := fr.node
	switch fr.phase {
	case oStart, oComma:
		switch {
		case b == '"' && m.canAddKey(&fr):
			fr.phase, fr.ws, fr.lo, fr.hi, fr.pos = oKey, 0, 0, int32(len(n.names)), 0
			return m.push(fr)
		case b == '}' && fr.phase == oStart && n.required == 0:
			return m.complete(fr.parent)
		}
	case oColon:
		if b == ':' {
			fr.phase, fr.ws = oValue, 0
			return m.push(fr)
		}
	case oValue:
		child := n.extra
		if fr.cur >= 0 {
			child = n.props[fr.cur]
		}
		fr.phase, fr.ws = pIn, 0
		return m.startValue(m.push(fr), child, fr.depth, b)
	case pAfter:
		switch {
		case b == ',' && m.canAddKey(&fr):
			fr.phase, fr.ws = oComma, 0
			return m.push(fr)
		case b == '}' && n.required&^fr.seen == 0:
			return m.complete(fr.parent)
		}
	}
	return -1
}

// canAddKey reports whether some key can still be written in the object:
// a property not yet seen, or an extra key while they are allowed.
func (m *machine) canAddKey(fr *frame) bool {
	n := fr.node
	return n.extra != nil && int(fr.extra) < n.maxExtra ||
		fr.seen != (uint64(1)<<len(n.names))-1
}

// key reads one byte of an object key. Keys are written without escapes,
// so their bytes are the key and can be matched against property names.
func (m *machine) key(fr frame, b byte) int32 {
	n := fr.node
	if fr.need > 0 {
		if !continuation(&fr, b) {
			return -1
		}
	} else if b == '"' {
		return m.closeKey(fr)
	} else {
		need, lo8, hi8, ok := utf8Lead(b)
		if !ok || b < 0x20 || b == '\\' || int(fr.pos)+1+int(need) > m.opts.MaxKeyBytes {
			return -1
		}
		fr.need, fr.lo8, fr.hi8 = need, lo8, hi8
	}
	lo, hi := narrow(n.names, int(fr.lo), int(fr.hi), int(fr.pos), b)
	fr.lo, fr.hi, fr.pos = int32(lo), int32(hi), fr.pos+1
	extraOK := n.extra != nil && int(fr.extra) < n.maxExtra
	if !extraOK && !unseenIn(fr.seen, lo, hi) {
		return -1
	}
	return m.push(fr)
}

func unseenIn(seen uint64, lo, hi int) bool {
	for i := lo; i < hi; i++ {
		if seen&(1<<i) == 0 {
			return true
		}
	}
	return false
}

func (m *machine) closeKey(fr frame) int32 {
	n := fr.node
	if fr.lo < fr.hi && len(n.names[fr.lo]) == int(fr.pos) {
		bit := uint64(1) << fr.lo
		if fr.seen&bit != 0 {
			return -1 // a duplicate key
		}
		fr.seen |= bit
		fr.cur = fr.lo
		if d := n.disc; d != nil && d.byKey != nil {
			// The first key picks the alternative the object follows.
			alt := d.byKey[n.names[fr.lo]]
			i := sort.SearchStrings(alt.names, n.names[fr.lo])
			fr.node, fr.seen, fr.cur = alt, uint64(1)<<i, int32(i)
			m.dropTooDeep(&fr)
		}
	} else {
		if n.extra == nil || int(fr.extra) >= n.maxExtra {
			return -1
		}
		fr.extra++
		fr.cur = -1
	}
	fr.phase = oColon
	return m.push(fr)
}

// done reports whether the document ending at top is complete.
func (m *machine) done(top int32) bool {
	fr := m.f[top]
	switch fr.kind {
	case kRoot:
		return fr.phase == pAfter
	case kNumber:
		return numberDone(fr) && m.f[fr.parent].kind == kRoot
	case kLiteral:
		return len(fr.node.lits[fr.lo]) == int(fr.pos) && m.f[fr.parent].kind == kRoot
	}
	return false
}

// compact copies the chain ending at top to the start of dst's arena and
// returns its new top.
func (m *machine) compactInto(dst *machine, top int32) int32 {
	var chain []int32
	for i := top; i >= 0; i = m.f[i].parent {
		chain = append(chain, i)
	}
	dst.f = dst.f[:0]
	for j := len(chain) - 1; j >= 0; j-- {
		fr := m.f[chain[j]]
		fr.parent = int32(len(dst.f)) - 1
		dst.f = append(dst.f, fr)
	}
	return int32(len(dst.f) - 1)
}

// State is a position in a document: the bytes accepted so far can be
// completed to a valid one. A State is not safe for concurrent use.
type State struct {
	m   machine
	top int32
}

// Start returns the state before the first byte of a document.
func (s *Schema) Start() *State {
	st := &State{m: machine{opts: &s.opts}}
	st.top = st.m.push(frame{node: s.root, parent: -1, kind: kRoot, phase: pValue})
	return st
}

// Accept advances over b and reports true, or reports false and stays put
// when no valid document continues with b.
func (st *State) Accept(b byte) bool {
	return st.AcceptBytes([]byte{b})
}

// AcceptBytes advances over all of p, or over none of it and reports false.
func (st *State) AcceptBytes(p []byte) bool {
	mark, top := len(st.m.f), st.top
	for _, b := range p {
		if top = st.m.step(top, b); top < 0 {
			st.m.f = st.m.f[:mark]
			return false
		}
	}
	st.top = top
	if len(st.m.f) > 1024 {
		var fresh machine
		st.top = st.m.compactInto(&fresh, st.top)
		st.m.f = fresh.f
	}
	return true
}

// Done reports whether the bytes accepted form a complete document. A
// complete number at the top level could still grow, so Done does not mean
// no byte may follow.
func (st *State) Done() bool { return st.m.done(st.top) }

// Closed reports whether the top-level value has ended, so that nothing
// but trailing whitespace may follow (unlike a top-level number, which is
// Done but could still grow).
func (st *State) Closed() bool {
	fr := st.m.f[st.top]
	return fr.kind == kRoot && fr.phase == pAfter
}

// Clone returns an independent copy of st.
func (st *State) Clone() *State {
	c := &State{m: machine{opts: st.m.opts}}
	c.top = st.m.compactInto(&c.m, st.top)
	return c
}
