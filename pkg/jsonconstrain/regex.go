package jsonconstrain

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The regular expressions of "pattern" (and the internal ones "format"
// compiles to) are ECMA-262 syntax, as JSON Schema specifies. parseRegex
// reads the part of that syntax a finite automaton can enforce into a tree;
// regexAutomaton (regexdfa.go) turns the tree into a DFA over the bytes of
// a JSON string. What no automaton can enforce (backreferences,
// look-around, word boundaries) is refused by name.

type rxKind uint8

const (
	rxChar   rxKind = iota // one character of set
	rxConcat               // subs in sequence (none: the empty string)
	rxAlt                  // one of subs
	rxRepeat               // subs[0], min to max times (max < 0: no limit)
	rxBegin                // ^: the start of the string
	rxEnd                  // $: the end of the string
)

type rx struct {
	kind     rxKind
	set      runeSet
	subs     []*rx
	min, max int
}

// runeSet is a set of Unicode scalar values: sorted, disjoint, non-adjacent
// ranges.
type runeSet []runeRange

type runeRange struct{ lo, hi rune }

const (
	surrogateLo = 0xD800
	surrogateHi = 0xDFFF
)

// anyRune is every character a JSON string can hold (no lone surrogates).
var anyRune = runeSet{{0, surrogateLo - 1}, {surrogateHi + 1, utf8.MaxRune}}

func normalize(rs []runeRange) runeSet {
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	var out runeSet
	for _, r := range rs {
		if r.lo > r.hi {
			continue
		}
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out.intersect(anyRune)
}

func (s runeSet) intersect(t runeSet) runeSet {
	var out runeSet
	i, j := 0, 0
	for i < len(s) && j < len(t) {
		lo, hi := max(s[i].lo, t[j].lo), min(s[i].hi, t[j].hi)
		if lo <= hi {
			out = append(out, runeRange{lo, hi})
		}
		if s[i].hi < t[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// complement is every JSON string character not in s.
func (s runeSet) complement() runeSet {
	var out []runeRange
	next := rune(0)
	for _, r := range s {
		out = append(out, runeRange{next, r.lo - 1})
		next = r.hi + 1
	}
	out = append(out, runeRange{next, utf8.MaxRune})
	return normalize(out)
}

func (s runeSet) union(t runeSet) runeSet {
	return normalize(append(append([]runeRange{}, s...), t...))
}

func set(ranges ...rune) runeSet {
	var rs []runeRange
	for i := 0; i+1 < len(ranges); i += 2 {
		rs = append(rs, runeRange{ranges[i], ranges[i+1]})
	}
	return normalize(rs)
}

// Where ECMA-262 and other engines disagree, the sets are what both
// accept, so a generated string matches under either reading: \s is the
// ASCII white space every engine counts (ECMA adds \v and Unicode spaces,
// RE2 and PCRE do not), \S excludes ECMA's larger set, and . excludes all of
// ECMA's line terminators (RE2's excludes only \n).
var (
	digitSet     = set('0', '9')
	wordSet      = set('0', '9', 'A', 'Z', '_', '_', 'a', 'z')
	spaceSet     = set('\t', '\n', '\f', '\r', ' ', ' ')
	ecmaSpaceSet = set('\t', '\r', ' ', ' ', 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A,
		0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF)
	dotSet = set('\n', '\n', '\r', '\r', 0x2028, 0x2029).complement()
)

// RegexError is a pattern nvmai cannot enforce or cannot read, at a byte
// offset into it.
type RegexError struct {
	Offset      int
	Message     string
	Unsupported bool // valid ECMA-262 that no automaton (or nvmai) enforces
}

func (e *RegexError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.Message, e.Offset)
}

// maxRegexNesting bounds the parser's recursion on groups.
const maxRegexNesting = 100

type regexParser struct {
	src   string
	pos   int
	depth int
	// repeats is the size the tree has grown to, counting each repeated
	// copy, so that nested counted repetitions cannot multiply without end.
	size, maxSize int
}

// parseRegex reads an ECMA-262 pattern (no flags). maxSize bounds the
// characters of the tree once counted repetitions are expanded.
func parseRegex(src string, maxSize int) (*rx, error) {
	if !utf8.ValidString(src) {
		return nil, &RegexError{0, "the pattern is not valid UTF-8", false}
	}
	p := &regexParser{src: src, maxSize: maxSize}
	re, err := p.alternation()
	if err != nil {
		return nil, err
	}
	if p.pos < len(src) {
		return nil, p.errorf(false, "unmatched )")
	}
	return re, nil
}

func (p *regexParser) errorf(unsupported bool, format string, args ...any) error {
	return &RegexError{p.pos, fmt.Sprintf(format, args...), unsupported}
}

func (p *regexParser) more() bool { return p.pos < len(p.src) }

func (p *regexParser) peek() rune {
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return r
}

func (p *regexParser) next() rune {
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += n
	return r
}

func (p *regexParser) alternation() (*rx, error) {
	var alts []*rx
	for {
		seq, err := p.sequence()
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if !p.more() || p.peek() != '|' {
			break
		}
		p.pos++
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &rx{kind: rxAlt, subs: alts}, nil
}

func (p *regexParser) sequence() (*rx, error) {
	seq := &rx{kind: rxConcat}
	for p.more() && p.peek() != '|' && p.peek() != ')' {
		atom, size, err := p.atom()
		if err != nil {
			return nil, err
		}
		atom, err = p.quantified(atom, size)
		if err != nil {
			return nil, err
		}
		seq.subs = append(seq.subs, atom)
	}
	if len(seq.subs) == 1 {
		return seq.subs[0], nil
	}
	return seq, nil
}

// atom reads one atom or assertion and reports the characters it adds to
// the tree's size.
func (p *regexParser) atom() (*rx, int, error) {
	before := p.size
	switch c := p.peek(); c {
	case '^':
		p.pos++
		return &rx{kind: rxBegin}, 0, nil
	case '$':
		p.pos++
		return &rx{kind: rxEnd}, 0, nil
	case '.':
		p.pos++
		return p.char(dotSet)
	case '[':
		s, err := p.class()
		if err != nil {
			return nil, 0, err
		}
		return p.char(s)
	case '\\':
		return p.escapeAtom()
	case '(':
		return p.group(before)
	case '*', '+', '?':
		return nil, 0, p.errorf(false, "nothing to repeat before %q", c)
	case '{':
		if _, _, ok := p.counted(); ok {
			return nil, 0, p.errorf(false, "nothing to repeat before %q", c)
		}
	}
	return p.char(set(p.peek(), p.next()))
}

func (p *regexParser) char(s runeSet) (*rx, int, error) {
	if err := p.grow(1); err != nil {
		return nil, 0, err
	}
	return &rx{kind: rxChar, set: s}, 1, nil
}

func (p *regexParser) grow(n int) error {
	p.size += n
	if p.size > p.maxSize {
		return p.errorf(true, "the pattern expands to more than %d characters (counted repetitions multiply)", p.maxSize)
	}
	return nil
}

func (p *regexParser) group(before int) (*rx, int, error) {
	p.pos++ // (
	if p.depth++; p.depth > maxRegexNesting {
		return nil, 0, p.errorf(true, "groups nest more than %d deep", maxRegexNesting)
	}
	defer func() { p.depth-- }()
	rest := p.src[p.pos:]
	switch {
	case strings.HasPrefix(rest, "?:"):
		p.pos += 2
	case strings.HasPrefix(rest, "?="), strings.HasPrefix(rest, "?!"):
		p.pos--
		return nil, 0, p.errorf(true, "look-ahead %s…) is not supported: nvmai's automaton cannot enforce it", "(?"+rest[1:2])
	case strings.HasPrefix(rest, "?<="), strings.HasPrefix(rest, "?<!"):
		p.pos--
		return nil, 0, p.errorf(true, "look-behind %s…) is not supported: nvmai's automaton cannot enforce it", "(?"+rest[1:3])
	case strings.HasPrefix(rest, "?<"):
		// A named group matches what an unnamed one does; its name only
		// matters to backreferences, which are refused.
		end := strings.IndexByte(rest, '>')
		if end < 3 || !groupName(rest[2:end]) {
			return nil, 0, p.errorf(false, "bad group name")
		}
		p.pos += end + 1
	case strings.HasPrefix(rest, "?"):
		return nil, 0, p.errorf(false, "unknown group syntax (?%s (ECMA-262 has no inline flags)", rest[1:min(len(rest), 2)])
	}
	inner, err := p.alternation()
	if err != nil {
		return nil, 0, err
	}
	if !p.more() || p.peek() != ')' {
		return nil, 0, p.errorf(false, "missing )")
	}
	p.pos++
	return inner, p.size - before, nil
}

func groupName(s string) bool {
	for i, r := range s {
		ok := r == '_' || r == '$' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9'
		if !ok {
			return false
		}
	}
	return s != ""
}

// counted reads {n}, {n,} or {n,m} at p.pos without moving; ok is false
// when the brace does not start one (ECMA-262 then reads it as a literal).
func (p *regexParser) counted() (lo, hi int, ok bool) {
	rest := p.src[p.pos:]
	end := strings.IndexByte(rest, '}')
	if !strings.HasPrefix(rest, "{") || end < 0 {
		return 0, 0, false
	}
	body := rest[1:end]
	a, b, comma := strings.Cut(body, ",")
	num := func(s string) (int, bool) {
		if s == "" || strings.Trim(s, "0123456789") != "" {
			return 0, false
		}
		v, err := strconv.Atoi(s)
		if err != nil || v > 1<<20 {
			v = 1 << 20 // refused later as too large
		}
		return v, true
	}
	lo, ok = num(a)
	if !ok {
		return 0, 0, false
	}
	switch {
	case !comma:
		hi = lo
	case b == "":
		hi = -1
	default:
		if hi, ok = num(b); !ok {
			return 0, 0, false
		}
	}
	return lo, hi, true
}

func (p *regexParser) quantified(atom *rx, size int) (*rx, error) {
	lo, hi, ok := p.quantifier()
	if !ok {
		return atom, nil
	}
	if hi >= 0 && lo > hi {
		return nil, p.errorf(false, "repetition {%d,%d} has its minimum over its maximum", lo, hi)
	}
	if atom.kind == rxBegin || atom.kind == rxEnd {
		return nil, p.errorf(false, "nothing to repeat (an assertion)")
	}
	// A lazy quantifier matches the same strings as a greedy one; only
	// which match a search finds differs, which a pattern test ignores.
	if p.more() && p.peek() == '?' {
		p.pos++
	}
	if _, _, again := p.quantifier(); again {
		return nil, p.errorf(false, "nothing to repeat (a quantifier after a quantifier)")
	}
	copies := hi // the expansion: hi copies, or lo and a starred one
	if hi < 0 {
		copies = lo + 1
	}
	if err := p.grow(size * (max(copies, 1) - 1)); err != nil {
		return nil, err
	}
	return &rx{kind: rxRepeat, subs: []*rx{atom}, min: lo, max: hi}, nil
}

// quantifier reads *, +, ?, {n}, {n,} or {n,m}; ok is false when there is
// none at p.pos.
func (p *regexParser) quantifier() (lo, hi int, ok bool) {
	if !p.more() {
		return 0, 0, false
	}
	switch p.peek() {
	case '*':
		p.pos++
		return 0, -1, true
	case '+':
		p.pos++
		return 1, -1, true
	case '?':
		p.pos++
		return 0, 1, true
	case '{':
		if lo, hi, ok = p.counted(); ok {
			p.pos += strings.IndexByte(p.src[p.pos:], '}') + 1
		}
		return lo, hi, ok
	}
	return 0, 0, false
}

func (p *regexParser) escapeAtom() (*rx, int, error) {
	p.pos++ // backslash
	if !p.more() {
		return nil, 0, p.errorf(false, "the pattern ends with a backslash")
	}
	switch c := p.peek(); {
	case c == 'b' || c == 'B':
		return nil, 0, p.errorf(true, "the word-boundary assertion \\%c is not supported", c)
	case c >= '1' && c <= '9':
		return nil, 0, p.errorf(true, "backreference \\%c is not supported: no finite automaton can enforce it", c)
	case c == 'k':
		return nil, 0, p.errorf(true, "backreference \\k<…> is not supported: no finite automaton can enforce it")
	}
	s, err := p.escape(false)
	if err != nil {
		return nil, 0, err
	}
	return p.char(s)
}

// escape reads the escape after a backslash into the set it stands for.
func (p *regexParser) escape(inClass bool) (runeSet, error) {
	at := p.pos
	c := p.next()
	switch c {
	case 'd':
		return digitSet, nil
	case 'D':
		return digitSet.complement(), nil
	case 'w':
		return wordSet, nil
	case 'W':
		return wordSet.complement(), nil
	case 's':
		return spaceSet, nil
	case 'S':
		return ecmaSpaceSet.complement(), nil
	case 'f':
		return set('\f', '\f'), nil
	case 'n':
		return set('\n', '\n'), nil
	case 'r':
		return set('\r', '\r'), nil
	case 't':
		return set('\t', '\t'), nil
	case 'v':
		return set('\v', '\v'), nil
	case 'b':
		if inClass {
			return set('\b', '\b'), nil
		}
	case '0':
		if !p.more() || p.peek() < '0' || p.peek() > '9' {
			return set(0, 0), nil
		}
		p.pos = at
		return nil, p.errorf(true, "octal escapes are not supported")
	case 'c':
		if p.more() {
			if l := p.peek(); l >= 'a' && l <= 'z' || l >= 'A' && l <= 'Z' {
				p.pos++
				return set(l%32, l%32), nil
			}
		}
	case 'x':
		if v, ok := p.hex(2); ok {
			return set(v, v), nil
		}
		p.pos = at
		return nil, p.errorf(false, "\\x needs two hex digits")
	case 'u':
		if strings.HasPrefix(p.src[p.pos:], "{") {
			p.pos = at
			return nil, p.errorf(true, "\\u{…} needs the u flag, which JSON Schema patterns do not have; write \\uXXXX")
		}
		v, ok := p.hex(4)
		if !ok {
			p.pos = at
			return nil, p.errorf(false, "\\u needs four hex digits")
		}
		if v >= 0xD800 && v <= 0xDBFF && strings.HasPrefix(p.src[p.pos:], "\\u") {
			save := p.pos
			p.pos += 2
			if lo, ok := p.hex(4); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				r := 0x10000 + (v-0xD800)<<10 + (lo - 0xDC00)
				return set(r, r), nil
			}
			p.pos = save
		}
		if v >= surrogateLo && v <= surrogateHi {
			p.pos = at
			return nil, p.errorf(true, "a lone surrogate \\u%04X cannot occur in a JSON string nvmai writes", v)
		}
		return set(v, v), nil
	case 'p', 'P':
		p.pos = at
		return nil, p.errorf(true, "Unicode property escapes (\\%c{…}) are not supported", c)
	}
	if c < utf8.RuneSelf && !isAlnum(c) || c == '-' {
		return set(c, c), nil // \. \* \/ and the like stand for themselves
	}
	p.pos = at
	return nil, p.errorf(false, "unknown escape \\%c", c)
}

func isAlnum(c rune) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func (p *regexParser) hex(n int) (rune, bool) {
	if p.pos+n > len(p.src) {
		return 0, false
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
	if err != nil || strings.ContainsAny(p.src[p.pos:p.pos+n], "+-_") {
		return 0, false
	}
	p.pos += n
	return rune(v), true
}

// class reads [...] or [^...].
func (p *regexParser) class() (runeSet, error) {
	start := p.pos
	p.pos++ // [
	negate := p.more() && p.peek() == '^'
	if negate {
		p.pos++
	}
	if p.more() && p.peek() == ']' {
		// ECMA-262 reads [] as nothing and [^] as anything; POSIX-style
		// engines read the ] as a literal. Refused rather than guessed.
		return nil, p.errorf(true, "the class %s means different things to different engines; write (?!) or [\\s\\S] out explicitly", p.src[start:p.pos+1])
	}
	var ranges, wide []runeRange
	for {
		if !p.more() {
			p.pos = start
			return nil, p.errorf(false, "missing ]")
		}
		if p.peek() == ']' {
			p.pos++
			break
		}
		rest := p.src[p.pos:]
		lo, loSet, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if p.more() && p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			hi, hiSet, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if loSet != nil || hiSet != nil {
				return nil, p.errorf(false, "a class escape cannot bound a range")
			}
			if lo > hi {
				return nil, p.errorf(false, "range out of order in class")
			}
			ranges = append(ranges, runeRange{lo, hi})
			wide = append(wide, runeRange{lo, hi})
			continue
		}
		switch {
		case loSet == nil:
			ranges = append(ranges, runeRange{lo, lo})
			wide = append(wide, runeRange{lo, lo})
		case strings.HasPrefix(rest, `\s`):
			ranges, wide = append(ranges, loSet...), append(wide, ecmaSpaceSet...)
		case strings.HasPrefix(rest, `\S`):
			ranges, wide = append(ranges, loSet...), append(wide, spaceSet.complement()...)
		default:
			ranges, wide = append(ranges, loSet...), append(wide, loSet...)
		}
	}
	// ranges holds what every engine's reading of the items matches, wide
	// what any reading may: a negated class excludes the latter.
	if negate {
		return normalize(wide).complement(), nil
	}
	return normalize(ranges), nil
}

// classAtom reads one character of a class, or a class escape (\d…) as a
// set of several.
func (p *regexParser) classAtom() (rune, runeSet, error) {
	if p.peek() != '\\' {
		return p.next(), nil, nil
	}
	p.pos++
	if !p.more() {
		return 0, nil, p.errorf(false, "the pattern ends with a backslash")
	}
	if c := p.peek(); c >= '1' && c <= '9' {
		return 0, nil, p.errorf(true, "octal escapes are not supported")
	}
	if strings.ContainsRune("dDwWsS", p.peek()) {
		s, err := p.escape(true)
		return 0, s, err
	}
	s, err := p.escape(true)
	if err != nil {
		return 0, nil, err
	}
	return s[0].lo, nil, nil
}
