package jsonconstrain

import (
	"fmt"
	"sort"
	"unicode/utf8"
)

// A string's patterns compile to one DFA over the bytes between its quotes,
// as JSON writes them. Each character of a pattern becomes the byte
// sequences that spell it in a JSON string: printable characters only as
// raw UTF-8, and the characters JSON must escape (", \ and the controls
// below U+0020) only as escapes: the short ones (\" \\ \b \f \n \r \t) and
// \u00XX for the rest (either case of hex digit). A character that may be
// written raw is thus never escaped inside a patterned string, so the bytes
// the automaton checks are the string itself.
//
// The DFA is built eagerly by subset construction over an NFA of byte
// edges, with the byte classes the edges distinguish as its alphabet, and
// capped by limits.PatternStates. Every state from which no matching
// string can be finished is pruned, and dist records how many more
// characters the shortest finish needs, so the string automaton never lets
// a string start that maxLength would cut short. minLength is counted into
// the states themselves (the least length is not an interval test once a
// pattern fixes lengths), so a string can always reach it too.

// stringDFA is the compiled automaton: next[state*width+class[b]] is the
// state after byte b, or -1.
type stringDFA struct {
	class  [256]uint8
	width  int32
	next   []int32
	accept []bool
	// dist is the fewest characters still to be started before an
	// accepting state: a byte from a state between characters starts one.
	dist    []int32
	maxDist int32 // the largest finite dist
}

func (d *stringDFA) step(state int32, b byte) int32 {
	return d.next[state*d.width+int32(d.class[b])]
}

// byteNFA is a Thompson NFA whose edges read bytes.
type byteNFA struct {
	states []nfaState
	limit  int
	full   bool
	raw    bool // every character spelled as its UTF-8 bytes (rawstring.go)
}

type nfaState struct {
	edges      []byteEdge
	eps        []int32
	begin, end []int32 // ^ and $ edges
	mid        bool    // inside one character's spelling
}

type byteEdge struct {
	lo, hi byte
	to     int32
}

func (a *byteNFA) add(mid bool) int32 {
	if len(a.states) >= a.limit {
		a.full = true
	}
	a.states = append(a.states, nfaState{mid: mid})
	return int32(len(a.states) - 1)
}

// compile adds re, starting at from, and returns its end state.
func (a *byteNFA) compile(re *rx, from int32) int32 {
	if a.full {
		return from
	}
	switch re.kind {
	case rxChar:
		to := a.add(false)
		a.chars(from, to, re.set)
		return to
	case rxConcat:
		for _, s := range re.subs {
			from = a.compile(s, from)
		}
		return from
	case rxAlt:
		to := a.add(false)
		for _, s := range re.subs {
			in := a.add(false)
			a.states[from].eps = append(a.states[from].eps, in)
			out := a.compile(s, in)
			a.states[out].eps = append(a.states[out].eps, to)
		}
		return to
	case rxRepeat:
		sub := re.subs[0]
		for i := 0; i < re.min; i++ {
			from = a.compile(sub, from)
		}
		if re.max < 0 {
			loop := a.add(false)
			a.states[from].eps = append(a.states[from].eps, loop)
			out := a.compile(sub, loop)
			a.states[out].eps = append(a.states[out].eps, loop)
			return loop
		}
		if re.max == re.min {
			return from
		}
		to := a.add(false)
		for i := re.min; i < re.max; i++ {
			a.states[from].eps = append(a.states[from].eps, to)
			from = a.compile(sub, from)
		}
		a.states[from].eps = append(a.states[from].eps, to)
		return to
	case rxBegin, rxEnd:
		to := a.add(false)
		if re.kind == rxBegin {
			a.states[from].begin = append(a.states[from].begin, to)
		} else {
			a.states[from].end = append(a.states[from].end, to)
		}
		return to
	}
	panic("jsonconstrain: unknown regex node")
}

// spelled are the characters JSON must escape.
var spelled = set(0, 0x1F, '"', '"', '\\', '\\')

var shortEscape = map[rune]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// chars adds edges from one state to another over the JSON spellings of
// the characters of s. The spellings share their states: a prefix two
// spellings have in common (\u00) is one path, and so is a tail of UTF-8
// continuation bytes, so that "." costs about a dozen states.
func (a *byteNFA) chars(from, to int32, s runeSet) {
	sp := speller{a: a, to: to, prefix: map[[3]int32]int32{}}
	if a.raw {
		for _, r := range s.intersect(anyRune) {
			utf8Sequences(r.lo, r.hi, func(seq [][2]byte) { sp.chain(from, seq) })
		}
		return
	}
	for _, r := range s.intersect(spelled) {
		for c := r.lo; c <= r.hi; c++ {
			if e, ok := shortEscape[c]; ok {
				sp.chain(from, [][2]byte{{'\\', '\\'}, {e, e}})
				continue
			}
			hi := byte('0' + c>>4)
			lo := "0123456789abcdef"[c&15]
			sp.chain(from, [][2]byte{{'\\', '\\'}, {'u', 'u'}, {'0', '0'}, {'0', '0'}, {hi, hi}, {lo, lo}})
			if lo >= 'a' {
				up := lo - 'a' + 'A'
				sp.chain(from, [][2]byte{{'\\', '\\'}, {'u', 'u'}, {'0', '0'}, {'0', '0'}, {hi, hi}, {up, up}})
			}
		}
	}
	for _, r := range s.intersect(spelled.complement()) {
		utf8Sequences(r.lo, r.hi, func(seq [][2]byte) { sp.chain(from, seq) })
	}
}

// speller adds the spellings of one chars call, sharing their states.
type speller struct {
	a      *byteNFA
	to     int32
	prefix map[[3]int32]int32 // (state, lo, hi) to the state that range leads to
	tails  [3]int32           // tails[k-1] reads k continuation bytes, then is at to
}

func (sp *speller) chain(from int32, seq [][2]byte) {
	cur := from
	for i, br := range seq {
		rest := seq[i+1:]
		next := sp.to
		switch key := [3]int32{cur, int32(br[0]), int32(br[1])}; {
		case len(rest) == 0:
		case continuations(rest):
			next = sp.tail(len(rest))
		default:
			if t, ok := sp.prefix[key]; ok {
				cur = t
				continue
			}
			next = sp.a.add(true)
			sp.prefix[key] = next
		}
		sp.a.states[cur].edges = append(sp.a.states[cur].edges, byteEdge{br[0], br[1], next})
		if len(rest) > 0 && continuations(rest) {
			return // the tail leads on to sp.to
		}
		cur = next
	}
}

func continuations(seq [][2]byte) bool {
	for _, br := range seq {
		if br != [2]byte{0x80, 0xBF} {
			return false
		}
	}
	return true
}

// tail returns the state that reads k continuation bytes and is then at
// sp.to, building it on first use.
func (sp *speller) tail(k int) int32 {
	if sp.tails[k-1] == 0 {
		next := sp.to
		if k > 1 {
			next = sp.tail(k - 1)
		}
		t := sp.a.add(true)
		sp.a.states[t].edges = append(sp.a.states[t].edges, byteEdge{0x80, 0xBF, next})
		sp.tails[k-1] = t
	}
	return sp.tails[k-1]
}

// utf8Sequences splits [lo, hi] (no surrogates) into ranges whose UTF-8
// encodings are the byte-range products seq, calling emit for each.
func utf8Sequences(lo, hi rune, emit func(seq [][2]byte)) {
	if lo > hi {
		return
	}
	for _, edge := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= edge && hi > edge {
			utf8Sequences(lo, edge, emit)
			utf8Sequences(edge+1, hi, emit)
			return
		}
	}
	if hi <= 0x7F {
		emit([][2]byte{{byte(lo), byte(hi)}})
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, (hi&^m)-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	var a, b [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	seq := make([][2]byte, n)
	for i := range seq {
		seq[i] = [2]byte{a[i], b[i]}
	}
	emit(seq)
}

// patternSource is one regular expression a string must match, and the
// keyword it came from for error messages.
type patternSource struct {
	regex   string
	keyword string // "pattern" or "format"
	label   string // what the error calls it: the pattern, or the format name
	maxLen  int    // the most characters the format allows (0: no limit)
}

// component is one pattern's part of the NFA: its states are
// [first, last], it is unanchored by a loop on any character before start
// and after end; done is that trailing loop, also the accepting state.
type component struct {
	first, last int32
	done        int32
}

// buildStringDFA compiles the patterns, all of which a string must match,
// with at least minLen and at most maxLen characters.
func buildStringDFA(pats []patternSource, minLen, maxLen, maxChars, maxStates int) (*stringDFA, *patternSource, error) {
	return buildSpelledDFA(false, pats, minLen, maxLen, maxChars, maxStates)
}

// buildSpelledDFA is buildStringDFA over JSON spellings, or with raw over
// the characters' UTF-8 bytes.
func buildSpelledDFA(raw bool, pats []patternSource, minLen, maxLen, maxChars, maxStates int) (*stringDFA, *patternSource, error) {
	if minLen > 0 {
		// Counting up to minLength multiplies the states; when no string
		// the patterns match is shorter (minLength 1 beside "^\d+$", an
		// e-mail address), the count is not needed.
		if d, _, err := buildCountedDFA(raw, pats, 0, maxLen, maxChars, maxStates); err == nil && int(d.dist[0]) >= minLen {
			return d, nil, nil
		}
	}
	return buildCountedDFA(raw, pats, minLen, maxLen, maxChars, maxStates)
}

// buildCountedDFA is buildStringDFA with minLen counted into the states.
func buildCountedDFA(raw bool, pats []patternSource, minLen, maxLen, maxChars, maxStates int) (*stringDFA, *patternSource, error) {
	if minLen > maxLen {
		return nil, nil, &RegexError{0, fmt.Sprintf("no string of %d to %d characters matches", minLen, maxLen), false}
	}
	a := &byteNFA{limit: 64 * maxChars, raw: raw}
	var comps []component
	var roots []int32
	for i := range pats {
		re, err := parseRegex(pats[i].regex, maxChars)
		if err != nil {
			return nil, &pats[i], err
		}
		c := component{first: int32(len(a.states))}
		lead := a.add(false)
		a.chars(lead, lead, anyRune)
		start := a.add(false)
		a.states[lead].eps = append(a.states[lead].eps, start)
		end := a.compile(re, start)
		c.done = a.add(false)
		a.states[end].eps = append(a.states[end].eps, c.done)
		a.chars(c.done, c.done, anyRune)
		c.last = int32(len(a.states) - 1)
		if a.full {
			return nil, &pats[i], &RegexError{0, fmt.Sprintf("the pattern needs more than %d automaton states", a.limit), true}
		}
		comps = append(comps, c)
		roots = append(roots, lead)
	}
	b := &dfaBuilder{nfa: a, comps: comps, minLen: int32(minLen), index: map[string]int32{}, maxStates: maxStates}
	b.classes()
	b.mark = make([]uint32, 2*len(a.states))
	var elems []int32
	for _, r := range roots {
		elems = append(elems, r<<1)
	}
	start := b.closure(elems, true)
	b.intern(start, 0)
	for i := 0; i < len(b.sets); i++ {
		if len(b.sets) > maxStates {
			return nil, nil, &RegexError{0, fmt.Sprintf("the patterns need more than %d automaton states together", maxStates), true}
		}
		if b.work > maxWork {
			return nil, nil, &RegexError{0, fmt.Sprintf("the patterns are too complex to compile (over %d automaton steps)", maxWork), true}
		}
		b.expand(int32(i))
	}
	d := b.finish()
	if d.dist[0] < 0 || int(d.dist[0]) > maxLen {
		return nil, nil, &RegexError{0, fmt.Sprintf("no string of %d to %d characters matches", minLen, maxLen), false}
	}
	return d, nil, nil
}

type dfaBuilder struct {
	nfa       *byteNFA
	comps     []component
	minLen    int32
	maxStates int

	class  [256]uint8
	reps   []byte // a byte of each class
	sets   [][]int32
	counts []int32 // characters read, up to minLen
	index  map[string]int32
	next   []int32

	mark []uint32 // closure's visited marks, by element
	gen  uint32

	buckets [][]int32 // expand's targets by class
	work    int       // NFA states visited, bounded by maxWork
}

// maxWork bounds the NFA states subset construction visits, so a pattern
// whose DFA is slow to build is refused in a fraction of a second rather
// than compiled for seconds on the request path.
const maxWork = 1 << 22

func (b *dfaBuilder) classes() {
	var cut [257]bool
	for _, s := range b.nfa.states {
		for _, e := range s.edges {
			cut[e.lo], cut[int(e.hi)+1] = true, true
		}
	}
	id := -1
	for i := 0; i < 256; i++ {
		if i == 0 || cut[i] {
			id++
			b.reps = append(b.reps, byte(i))
		}
		b.class[i] = uint8(id)
	}
}

// closure follows epsilon edges from elems; an element is a state shifted
// left once, with the low bit set once a $ has been passed (no character
// may follow). ^ edges are followed only at the start. A component that
// reached its trailing loop between characters matches whatever follows,
// so its threads collapse to that loop alone.
func (b *dfaBuilder) closure(elems []int32, atStart bool) []int32 {
	b.gen++
	var out []int32
	stack := append([]int32{}, elems...)
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if b.mark[e] == b.gen {
			continue
		}
		b.mark[e] = b.gen
		out = append(out, e)
		s := &b.nfa.states[e>>1]
		after := e & 1
		for _, t := range s.eps {
			stack = append(stack, t<<1|after)
		}
		for _, t := range s.end {
			stack = append(stack, t<<1|1)
		}
		if atStart {
			for _, t := range s.begin {
				stack = append(stack, t<<1|after)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	kept := make([]int32, 0, len(out))
	for _, c := range b.comps {
		done := b.mark[c.done<<1] == b.gen
		for _, e := range out {
			if s := e >> 1; s >= c.first && s <= c.last && (!done || e == c.done<<1) {
				kept = append(kept, e)
			}
		}
	}
	return kept
}

func (b *dfaBuilder) intern(set []int32, count int32) int32 {
	key := make([]byte, 0, 4*len(set)+4)
	for _, v := range append([]int32{count}, set...) {
		key = append(key, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	if i, ok := b.index[string(key)]; ok {
		return i
	}
	i := int32(len(b.sets))
	b.index[string(key)] = i
	b.sets = append(b.sets, set)
	b.counts = append(b.counts, count)
	for range b.reps {
		b.next = append(b.next, -1)
	}
	return i
}

// between reports whether a set is between characters (not inside one's
// spelling). The JSON spellings are a prefix code, so every thread of a
// set agrees.
func (b *dfaBuilder) between(set []int32) bool {
	return len(set) > 0 && !b.nfa.states[set[0]>>1].mid
}

func (b *dfaBuilder) live(set []int32) bool {
	// Every component must keep a thread.
	for _, c := range b.comps {
		found := false
		for _, e := range set {
			if s := e >> 1; s >= c.first && s <= c.last {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (b *dfaBuilder) expand(i int32) {
	set, count := b.sets[i], b.counts[i]
	if b.between(set) {
		count = min(count+1, b.minLen)
	}
	width := int32(len(b.reps))
	if b.buckets == nil {
		b.buckets = make([][]int32, width)
	}
	for _, e := range set {
		if e&1 != 0 {
			continue
		}
		for _, edge := range b.nfa.states[e>>1].edges {
			for c := b.class[edge.lo]; ; c++ {
				b.buckets[c] = append(b.buckets[c], edge.to<<1)
				if c == b.class[edge.hi] {
					break
				}
			}
		}
	}
	for class, targets := range b.buckets {
		if len(targets) == 0 {
			continue
		}
		next := b.closure(targets, false)
		b.work += len(targets) + len(next)
		b.buckets[class] = targets[:0]
		if b.live(next) {
			b.next[i*width+int32(class)] = b.intern(next, count)
		}
	}
}

func (b *dfaBuilder) accepting(i int32) bool {
	if b.counts[i] < b.minLen {
		return false
	}
	for _, c := range b.comps {
		found := false
		for _, e := range b.sets[i] {
			if e>>1 == c.done {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// finish computes acceptance and distances and prunes dead states.
func (b *dfaBuilder) finish() *stringDFA {
	n := int32(len(b.sets))
	width := int32(len(b.reps))
	d := &stringDFA{class: b.class, width: width, next: b.next, accept: make([]bool, n), dist: make([]int32, n)}
	// 0-1 breadth-first search backwards from the accepting states: a
	// byte from a state between characters costs one character.
	into := make([][]int32, n)
	for s := int32(0); s < n; s++ {
		for c := int32(0); c < width; c++ {
			if t := d.next[s*width+c]; t >= 0 {
				into[t] = append(into[t], s)
			}
		}
	}
	var level []int32
	for s := int32(0); s < n; s++ {
		d.dist[s] = -1
		if b.accepting(s) {
			d.accept[s] = true
			d.dist[s] = 0
			level = append(level, s)
		}
	}
	for at := int32(0); len(level) > 0; at++ {
		var further []int32
		for k := 0; k < len(level); k++ {
			t := level[k]
			if d.dist[t] != at {
				continue // reached again more cheaply
			}
			for _, s := range into[t] {
				cost := int32(0)
				if b.between(b.sets[s]) {
					cost = 1
				}
				if nd := at + cost; d.dist[s] < 0 || nd < d.dist[s] {
					d.dist[s] = nd
					if cost == 0 {
						level = append(level, s)
					} else {
						further = append(further, s)
					}
				}
			}
		}
		level = further
	}
	for i, t := range d.next {
		if t >= 0 && d.dist[t] < 0 {
			d.next[i] = -1
		}
	}
	for _, v := range d.dist {
		d.maxDist = max(d.maxDist, v)
	}
	return d
}
