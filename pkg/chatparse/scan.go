package chatparse

import "strings"

// status is what a matcher knows about the text at a position.
type status int

const (
	no      status = iota // the markup is not there
	partial               // the text so far is a prefix of it: need more text
	yes                   // the markup is there
)

const (
	spaces = " \t\r\n"
	// maxSpace bounds the whitespace a lookahead skips between tags; more
	// means the tags are not structural (and keeps what is held back small).
	maxSpace = 64
	// maxName bounds function and parameter names, so an unclosed
	// "<function=" is given up rather than held back without end.
	maxName = 256
)

// scan matches markup in s at given positions. With final, s is all the
// output there will be: a prefix is no longer partial, and the end of s is
// the end of the output.
type scan struct {
	s     string
	final bool
}

func (sc scan) lit(i int, lit string) (int, status) {
	rest := sc.s[i:]
	if strings.HasPrefix(rest, lit) {
		return i + len(lit), yes
	}
	if !sc.final && len(rest) < len(lit) && strings.HasPrefix(lit, rest) {
		return i, partial
	}
	return i, no
}

// ws skips whitespace; partial when it runs to the end of unfinished text.
func (sc scan) ws(i int) (int, status) {
	j := i
	for j < len(sc.s) && strings.IndexByte(spaces, sc.s[j]) >= 0 {
		j++
		if j-i > maxSpace {
			return j, no
		}
	}
	if j == len(sc.s) && !sc.final {
		return j, partial
	}
	return j, yes
}

// eos: the end of the output is at i.
func (sc scan) eos(i int) status {
	switch {
	case i < len(sc.s):
		return no
	case sc.final:
		return yes
	}
	return partial
}

// name reads NAME> at i: a function or parameter name and its '>'. Names
// with whitespace, quotes, braces or angle brackets are refused, so that an
// unrendered "<function={{ name }}>" is not taken for a call.
func (sc scan) name(i int) (string, int, status) {
	for j := i; j < len(sc.s); j++ {
		switch c := sc.s[j]; {
		case c == '>':
			if j == i {
				return "", i, no
			}
			return sc.s[i:j], j + 1, yes
		case strings.IndexByte(" \t\r\n{}<\"'", c) >= 0:
			return "", i, no
		}
		if j-i >= maxName {
			return "", i, no
		}
	}
	if sc.final {
		return "", i, no
	}
	return "", i, partial
}

// seq runs matchers one after another while they say yes.
func (sc scan) seq(i int, steps ...func(int) (int, status)) (int, status) {
	for _, step := range steps {
		var st status
		if i, st = step(i); st != yes {
			return i, st
		}
	}
	return i, yes
}

// first is the first alternative that matches; partial if none does but
// one still may.
func first(i int, alts ...func(int) (int, status)) (int, status) {
	best := no
	for _, alt := range alts {
		end, st := alt(i)
		if st == yes {
			return end, yes
		}
		if st == partial {
			best = partial
		}
	}
	return i, best
}

func (sc scan) litf(lit string) func(int) (int, status) {
	return func(i int) (int, status) { return sc.lit(i, lit) }
}

func (sc scan) eosf(i int) (int, status) { return i, sc.eos(i) }

// opener matches a call's opening at i: <tool_call>, whitespace,
// <function=NAME>. A <tool_call> not followed by <function= is text.
func (sc scan) opener(i int) (int, string, status) {
	j, st := sc.seq(i, sc.litf("<tool_call>"), sc.ws, sc.litf("<function="))
	if st != yes {
		return i, "", st
	}
	name, end, st := sc.name(j)
	return end, name, st
}

// paramOpener matches <parameter=NAME> at i.
func (sc scan) paramOpener(i int) (int, string, status) {
	j, st := sc.lit(i, "<parameter=")
	if st != yes {
		return i, "", st
	}
	name, end, st := sc.name(j)
	return end, name, st
}

// callEnd matches what may follow a call's </tool_call>: the end of the
// output or the next call.
func (sc scan) callEnd(i int) (int, status) {
	return first(i, sc.eosf, sc.litf("<tool_call>"))
}

// closeTail matches "</tool_call> ws (end | <tool_call>)" at i.
func (sc scan) closeTail(i int) (int, status) {
	return sc.seq(i, sc.litf("</tool_call>"), sc.ws, sc.callEnd)
}

// functionTail matches "</function> ws (closeTail | end)" at i.
func (sc scan) functionTail(i int) (int, status) {
	return sc.seq(i, sc.litf("</function>"), sc.ws, func(j int) (int, status) {
		return first(j, sc.closeTail, sc.eosf)
	})
}

// truncatedTail: at the end of the output, the rest from i is the start of
// what follows a real </parameter> (generation stopped inside the tags).
func (sc scan) truncatedTail(i int) (int, status) {
	if !sc.final {
		return i, no
	}
	rest := sc.s[i:]
	if strings.HasPrefix(rest, "</function>") {
		rest = strings.TrimLeft(rest[len("</function>"):], spaces)
		if strings.HasPrefix("</tool_call>", rest) {
			return i, yes
		}
		return i, no
	}
	for _, tag := range []string{"</function>", "</tool_call>", "<parameter="} {
		if strings.HasPrefix(tag, rest) {
			return i, yes
		}
	}
	if name, ok := strings.CutPrefix(rest, "<parameter="); ok && !strings.ContainsAny(name, " \t\r\n{}<>\"'") {
		return i, yes
	}
	return i, no
}

// terminator is how a value ended.
type terminator int

const (
	endParamClose terminator = iota // </parameter> (consumed)
	endNextParam                    // a <parameter= follows (not consumed)
	endFunction                     // </function> (consumed)
	endCall                         // </tool_call> (consumed)
)

// valueEnd decides whether the '<' at i ends the current value, and how.
// A closing tag inside a value is structural only when what follows it is
// what follows a real one, so values may contain "</parameter>",
// "</function>", "</tool_call>" or whole example calls:
//   - </parameter>, then whitespace and one of: <parameter=NAME> (an unused
//     parameter of the tool), </function> ws (</tool_call> ws (end |
//     <tool_call>) | end), </tool_call> ws (end | <tool_call>), or the end;
//   - a missing </parameter>: at the start of a line, <parameter=NAME> (as
//     above), </function> (followed as above) or </tool_call> (followed as
//     above).
//
// end is where the consumed terminator ends (i for endNextParam).
func (sc scan) valueEnd(i int, lineStart bool, accept func(string) bool) (terminator, int, status) {
	param := func(j int) (int, status) {
		end, name, st := sc.paramOpener(j)
		if st == yes && !accept(name) {
			return j, no
		}
		return end, st
	}
	afterClose := func(j int) (int, status) {
		return first(j, param, sc.functionTail, sc.closeTail, sc.eosf, sc.truncatedTail)
	}
	closeEnd, st := sc.lit(i, "</parameter>")
	if st == yes {
		if _, st2 := sc.seq(closeEnd, sc.ws, afterClose); st2 != no {
			return endParamClose, closeEnd, st2
		}
	} else if st == partial {
		return 0, i, partial
	}
	if !lineStart {
		return 0, i, no
	}
	if _, st := param(i); st != no {
		return endNextParam, i, st
	}
	if _, st := sc.functionTail(i); st != no {
		return endFunction, i + len("</function>"), st
	}
	if _, st := sc.closeTail(i); st != no {
		return endCall, i + len("</tool_call>"), st
	}
	return 0, i, no
}
