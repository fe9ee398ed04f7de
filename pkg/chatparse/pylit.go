package chatparse

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxLiteralDepth bounds the nesting of a Python literal (the parser
// recurses); a deeper value is left a string.
const maxLiteralDepth = 100

// pythonLiteral converts a Python literal (what ast.literal_eval accepts of
// None, True, False, numbers, strings, lists, tuples and dicts) into compact
// JSON, the way json.dumps would write the value. Dict keys become strings
// as json.dumps makes them.
func pythonLiteral(s string) (string, bool) {
	p := pyParser{s: s}
	var b strings.Builder
	if !p.value(&b, 0) {
		return "", false
	}
	p.space()
	if p.i != len(p.s) {
		return "", false
	}
	return b.String(), true
}

type pyParser struct {
	s string
	i int
}

func (p *pyParser) space() {
	for p.i < len(p.s) && strings.IndexByte(spaces, p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyParser) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyParser) value(b *strings.Builder, depth int) bool {
	if depth > maxLiteralDepth {
		return false
	}
	p.space()
	if p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '[':
		p.i++
		return p.sequence(b, ']', depth)
	case c == '(':
		p.i++
		return p.sequence(b, ')', depth)
	case c == '{':
		p.i++
		return p.dict(b, depth)
	case c == '\'' || c == '"':
		s, ok := p.str()
		if ok {
			b.WriteString(jsonString(s))
		}
		return ok
	}
	for _, kw := range []struct{ py, js string }{{"None", "null"}, {"True", "true"}, {"False", "false"}} {
		if strings.HasPrefix(p.s[p.i:], kw.py) {
			p.i += len(kw.py)
			b.WriteString(kw.js)
			return true
		}
	}
	return p.number(b)
}

func (p *pyParser) sequence(b *strings.Builder, end byte, depth int) bool {
	b.WriteByte('[')
	for n := 0; ; n++ {
		if p.eat(end) {
			b.WriteByte(']')
			return true
		}
		if n > 0 {
			b.WriteByte(',')
		}
		if !p.value(b, depth+1) {
			return false
		}
		if !p.eat(',') {
			if !p.eat(end) {
				return false
			}
			b.WriteByte(']')
			return true
		}
	}
}

func (p *pyParser) dict(b *strings.Builder, depth int) bool {
	b.WriteByte('{')
	for n := 0; ; n++ {
		if p.eat('}') {
			b.WriteByte('}')
			return true
		}
		if n > 0 {
			b.WriteByte(',')
		}
		var key strings.Builder
		if !p.value(&key, depth+1) {
			return false
		}
		k := key.String()
		switch {
		case strings.HasPrefix(k, `"`):
		case k == "[" || strings.HasPrefix(k, "[") || strings.HasPrefix(k, "{"):
			return false // unhashable (or, for tuples, not a JSON key)
		default:
			k = jsonString(k) // numbers, true, false, null: json.dumps' key text
		}
		b.WriteString(k)
		b.WriteByte(':')
		if !p.eat(':') || !p.value(b, depth+1) {
			return false
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return false
			}
			b.WriteByte('}')
			return true
		}
	}
}

// str reads a quoted Python string with its common escapes.
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), true
		case c == '\n':
			return "", false
		case c != '\\':
			b.WriteByte(c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if p.i+n > len(p.s) {
				return "", false
			}
			r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
			if err != nil || !utf8.ValidRune(rune(r)) {
				return "", false
			}
			b.WriteRune(rune(r))
			p.i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false
}

func (p *pyParser) number(b *strings.Builder) bool {
	j := p.i
	for j < len(p.s) && strings.IndexByte("+-0123456789.eE_", p.s[j]) >= 0 {
		j++
	}
	text := strings.ReplaceAll(p.s[p.i:j], "_", "")
	if text == "" {
		return false
	}
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		b.WriteString(strconv.FormatInt(i, 10))
		p.i = j
		return true
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return false
	}
	out := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(out, ".eEn") {
		out += ".0" // Python writes a float with a point
	}
	b.WriteString(out)
	p.i = j
	return true
}
