package jsonconstrain

import (
	"errors"
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/limits"
)

// A raw string is a string schema's value written as text rather than as a
// JSON string: the Qwen3-Coder tool-call format writes a string parameter's
// value between its tags as it is (pkg/toolconstrain). Its pattern and
// format compile through the same DFA as a JSON string's, with every
// character spelled as its UTF-8 bytes instead of its JSON spelling.

// RawStringSpec is what a raw string must satisfy: the keywords of a
// string schema. MaxLength is -1 when the schema has none.
type RawStringSpec struct {
	Pattern   string // "" for none
	Format    string // "" for none
	MinLength int
	MaxLength int
}

// RawString is a compiled raw string: a DFA over the value's bytes, which
// are valid UTF-8. States are 0..States()-1; Step returns -1 for a byte no
// matching value continues with, and from every other state an accepting
// one can be reached. minLength is counted into the states; maxLength is
// not (MaxLength reports it, with a format's own bound, for the caller to
// count), since counting it would multiply the states.
type RawString struct {
	d      *stringDFA
	maxLen int
}

// CompileRawString compiles spec, or fails naming the keyword: a pattern
// nvmai cannot enforce or read, a format it does not enforce, or bounds no
// value fits.
func CompileRawString(spec RawStringSpec) (*RawString, error) {
	var pats []patternSource
	if spec.Pattern != "" {
		pats = append(pats, patternSource{regex: spec.Pattern, keyword: "pattern", label: fmt.Sprintf("pattern %q", spec.Pattern)})
	}
	if spec.Format != "" {
		fp, ok := formatSources(spec.Format)
		if !ok {
			return nil, fmt.Errorf("format %q is not one nvmai enforces (it enforces %s)", spec.Format, formatNames())
		}
		pats = append(pats, fp...)
	}
	if len(pats) == 0 {
		// Any text of the lengths: "" matches everything.
		pats = append(pats, patternSource{regex: "", keyword: "pattern", label: `pattern ""`})
	}
	maxLen := spec.MaxLength
	if maxLen < 0 {
		maxLen = math.MaxInt32
	}
	for _, p := range pats {
		if p.maxLen > 0 {
			maxLen = min(maxLen, p.maxLen)
		}
	}
	if spec.MinLength < 0 {
		return nil, fmt.Errorf("minLength %d is negative", spec.MinLength)
	}
	d, which, err := buildSpelledDFA(true, pats, spec.MinLength, maxLen, limits.PatternChars, limits.PatternStates)
	if err != nil {
		var re *RegexError
		switch {
		case which == nil:
			return nil, fmt.Errorf("%s: %w", describePatterns(pats), err)
		case which.keyword == "format":
			return nil, fmt.Errorf("%s: internal pattern: %w", which.label, err)
		case errors.As(err, &re) && re.Unsupported:
			return nil, fmt.Errorf("unsupported %s: %w", which.label, err)
		}
		return nil, fmt.Errorf("%s is not an ECMA-262 regular expression: %w", which.label, err)
	}
	r := &RawString{d: d, maxLen: -1}
	if maxLen != math.MaxInt32 {
		r.maxLen = maxLen
	}
	return r, nil
}

// Start is the state before the value's first byte.
func (r *RawString) Start() int32 { return 0 }

// Step is the state after byte b from s, or -1.
func (r *RawString) Step(s int32, b byte) int32 { return r.d.step(s, b) }

// Accepting reports whether the bytes that led to s are a whole value.
func (r *RawString) Accepting(s int32) bool { return r.d.accept[s] }

// States is the number of states.
func (r *RawString) States() int { return len(r.d.accept) }

// MaxLength is the most characters a value may have, -1 for no bound.
func (r *RawString) MaxLength() int { return r.maxLen }

// Class is b's byte class: bytes of one class lead every state to the same
// state.
func (r *RawString) Class(b byte) uint8 { return r.d.class[b] }
