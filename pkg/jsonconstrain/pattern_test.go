package jsonconstrain

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// jsonString writes s as the automaton expects it inside a patterned
// string: printable characters raw, the rest with the short escapes or
// \u00XX.
func jsonString(s string) []byte {
	b := []byte{'"'}
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			if e, ok := shortEscape[r]; ok {
				b = append(b, '\\', e)
			} else {
				b = fmt.Appendf(b, `\u%04x`, r)
			}
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func patternSchema(pattern string, extra string) string {
	return `{"type":"string","pattern":` + string(jsonString(pattern)) + extra + `}`
}

// accepts reports whether the compiled schema accepts the JSON document.
func accepts(s *Schema, doc []byte) bool {
	st := s.Start()
	return st.AcceptBytes(doc) && st.Done()
}

// Strings through the automaton: each pattern accepts and refuses what
// ECMA-262 matching (unanchored unless ^ or $ say otherwise) does.
func TestPatternStrings(t *testing.T) {
	tests := []struct {
		pattern, extra string
		accepts        []string
		refuses        []string
	}{
		{pattern: "abc", accepts: []string{"abc", "xxabcxx", "abcabc"}, refuses: []string{"", "ab", "acb", "xxabxcx"}},
		{pattern: "^abc", accepts: []string{"abc", "abcxx"}, refuses: []string{"xabc"}},
		{pattern: "abc$", accepts: []string{"abc", "xxabc"}, refuses: []string{"abcx"}},
		{pattern: "^a|b$", accepts: []string{"a", "axx", "xxb", "b"}, refuses: []string{"xa", "bx", ""}},
		{pattern: "^(a|bc)+$", accepts: []string{"a", "bca", "abcbca"}, refuses: []string{"", "b", "ab", "abcb"}},
		{pattern: "^(?:ab)*$", accepts: []string{"", "ab", "abab"}, refuses: []string{"a", "aba"}},
		{pattern: "^x?y+z*$", accepts: []string{"y", "xyy", "yzz"}, refuses: []string{"x", "xxy", "yx"}},
		{pattern: "^a{3}$", accepts: []string{"aaa"}, refuses: []string{"aa", "aaaa"}},
		{pattern: "^a{2,3}$", accepts: []string{"aa", "aaa"}, refuses: []string{"a", "aaaa"}},
		{pattern: "^a{2,}$", accepts: []string{"aa", "aaaaaaa"}, refuses: []string{"a"}},
		{pattern: "^a{0}b$", accepts: []string{"b"}, refuses: []string{"ab"}},
		{pattern: "^a+?b??$", accepts: []string{"a", "aab"}, refuses: []string{"b"}}, // lazy: same language
		{pattern: "^(?<year>\\d{4})-(?<m>\\d\\d)$", accepts: []string{"2024-01"}, refuses: []string{"24-01"}},
		{pattern: `^\d+$`, accepts: []string{"0", "123"}, refuses: []string{"", "1a", "١"}},
		{pattern: `^\D$`, accepts: []string{"a", "é"}, refuses: []string{"1"}},
		{pattern: `^\w+$`, accepts: []string{"a_Z9"}, refuses: []string{"a-b", "é"}},
		{pattern: `^\W$`, accepts: []string{"-", "é"}, refuses: []string{"a", "_"}},
		{pattern: `^\s$`, accepts: []string{" ", "\t", "\n", "\r", "\f"}, refuses: []string{"a", "\u00a0", "\v"}},
		{pattern: `^\S$`, accepts: []string{"a", "é"}, refuses: []string{" ", "\u00a0", "\v", "\u2028"}},
		{pattern: `^.$`, accepts: []string{"a", "é", "😀", "\t", `"`, `\`}, refuses: []string{"\n", "\r", "\u2028", "ab", ""}},
		{pattern: `^\.\*\\\/\-\[\]\{\}\(\)\|\^\$\?\+$`, accepts: []string{`.*\/-[]{}()|^$?+`}, refuses: []string{`x*\/-[]{}()|^$?+`}},
		{pattern: `^\u00e9\x41\t\n\r\f\v\0\cJ$`, accepts: []string{"éA\t\n\r\f\v\x00\n"}, refuses: []string{"eA\t\n\r\f\v\x00\n"}},
		{pattern: `^\uD83D\uDE00$`, accepts: []string{"😀"}, refuses: []string{"?"}},
		{pattern: `^[a-c]+$`, accepts: []string{"abcba"}, refuses: []string{"abd", ""}},
		{pattern: `^[^a-c]$`, accepts: []string{"d", "\n", `"`, "é"}, refuses: []string{"a", "b"}},
		{pattern: `^[\d.-]+$`, accepts: []string{"1.5-2"}, refuses: []string{"1,5"}},
		{pattern: `^[\w\s]$`, accepts: []string{"a", " "}, refuses: []string{"-", "\u00a0"}},
		// a negated \s excludes every engine's spaces, \S every engine's non-spaces
		{pattern: `^[^\s]$`, accepts: []string{"a", "é"}, refuses: []string{" ", "\u00a0", "\v", "\u2028"}},
		{pattern: `^[^\S]$`, accepts: []string{" ", "\t"}, refuses: []string{"a", "\u00a0", "\v"}},
		{pattern: `^[\b]$`, accepts: []string{"\b"}, refuses: []string{"b"}},
		{pattern: `^[-a]$`, accepts: []string{"-", "a"}, refuses: []string{"b"}},
		{pattern: `^[a-]$`, accepts: []string{"-", "a"}, refuses: []string{"b"}},
		{pattern: `^[é-ë]$`, accepts: []string{"é", "ê", "ë"}, refuses: []string{"e", "ì"}},
		{pattern: `^[\u0000-\u001f]$`, accepts: []string{"\x00", "\x1f", "\n"}, refuses: []string{" "}},
		{pattern: `^a{$`, accepts: []string{"a{"}, refuses: []string{"a"}}, // not a quantifier: a literal
		{pattern: `^a{,2}$`, accepts: []string{"a{,2}"}, refuses: []string{"aa"}},
		{pattern: `^]}$`, accepts: []string{"]}"}},
		{pattern: "", accepts: []string{"", "anything"}},
		{pattern: "^$", accepts: []string{""}, refuses: []string{"a"}},
		{pattern: `^"\\$`, accepts: []string{`"\`}, refuses: []string{`\"`}},
		// lengths beside a pattern: the automaton counts them in
		{pattern: "^(ab)*$", extra: `,"minLength":3,"maxLength":5`, accepts: []string{"abab"}, refuses: []string{"ab", "ababab", ""}},
		{pattern: "a", extra: `,"maxLength":3`, accepts: []string{"a", "xxa", "axx"}, refuses: []string{"xxxa", "xxx"}},
		{pattern: "^[ab]*$", extra: `,"minLength":2`, accepts: []string{"ab", "bbb"}, refuses: []string{"a", ""}},
	}
	for _, tc := range tests {
		schema := patternSchema(tc.pattern, tc.extra)
		s, err := Compile(json.RawMessage(schema))
		if err != nil {
			t.Errorf("%s: %v", schema, err)
			continue
		}
		for _, str := range tc.accepts {
			if !accepts(s, jsonString(str)) {
				t.Errorf("%s refuses %s", schema, jsonString(str))
			}
		}
		for _, str := range tc.refuses {
			if accepts(s, jsonString(str)) {
				t.Errorf("%s accepts %s", schema, jsonString(str))
			}
		}
	}
}

// A character JSON may write raw is accepted only raw inside a patterned
// string; the characters it must escape, only escaped.
func TestPatternSpelling(t *testing.T) {
	s := mustCompile(t, patternSchema(`^[a"\n\u0001é]+$`, ""))
	for _, tc := range []struct {
		doc string
		ok  bool
	}{
		{`"a\"\n\u0001é"`, true},
		{`"\u0001\u0001"`, true},
		{`"\u0061"`, false}, // a, escaped
		{`"\u00e9"`, false}, // é, escaped
		{`"\u000a"`, false}, // \n has a short escape
		{`"\/"`, false},
		{`"\u001F"`, false},
	} {
		if got := accepts(s, []byte(tc.doc)); got != tc.ok {
			t.Errorf("%s: accepted %v, want %v", tc.doc, got, tc.ok)
		}
	}
	ctl := mustCompile(t, patternSchema(`^\x1f$`, ""))
	for _, doc := range []string{`"\u001f"`, `"\u001F"`} {
		if !accepts(ctl, []byte(doc)) {
			t.Errorf("%s refused", doc)
		}
	}
}

// Patterns outside the subset are refused, naming the keyword and what in
// the pattern is at fault; syntax errors are told apart from unsupported
// constructs.
func TestPatternRefusals(t *testing.T) {
	tests := []struct {
		pattern     string
		unsupported bool
		want        string
	}{
		{`(a)\1`, true, `backreference \1`},
		{`(?<n>a)\k<n>`, true, `backreference \k`},
		{`a(?=b)`, true, `look-ahead (?=`},
		{`a(?!b)`, true, `look-ahead (?!`},
		{`(?<=a)b`, true, `look-behind (?<=`},
		{`(?<!a)b`, true, `look-behind (?<!`},
		{`\bword\b`, true, `word-boundary assertion \b`},
		{`\Bx`, true, `word-boundary assertion \B`},
		{`\p{L}`, true, `Unicode property escapes`},
		{`\u{1F600}`, true, `needs the u flag`},
		{`[]`, true, `means different things`},
		{`[^]`, true, `means different things`},
		{`\uD800`, true, `lone surrogate`},
		{`\01`, true, `octal`},
		{`a{5000}`, true, `more than 4096 characters`},
		{`(a{100}){100}`, true, `more than 4096 characters`},
		{`(`, false, `missing )`},
		{`)`, false, `unmatched )`},
		{`[a`, false, `missing ]`},
		{`*a`, false, `nothing to repeat`},
		{`a**`, false, `nothing to repeat`},
		{`^*`, false, `nothing to repeat`},
		{`a{3,2}`, false, `minimum over its maximum`},
		{`[z-a]`, false, `out of order`},
		{`[\d-z]`, false, `class escape cannot bound`},
		{`\q`, false, `unknown escape \q`},
		{`(?i)a`, false, `unknown group syntax`},
		{`\x4`, false, `two hex digits`},
		{`a\`, false, `ends with a backslash`},
	}
	for _, tc := range tests {
		_, err := Compile(json.RawMessage(patternSchema(tc.pattern, "")))
		var se *SchemaError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pattern %q: %v, want …%s", tc.pattern, err, tc.want)
			continue
		}
		if se.Problems[0].Keyword != "pattern" || se.Problems[0].Pointer != "/pattern" {
			t.Errorf("pattern %q: problem at %q names %q", tc.pattern, se.Problems[0].Pointer, se.Problems[0].Keyword)
		}
		if se.Unsupported() != tc.unsupported {
			t.Errorf("pattern %q: Unsupported() = %v, want %v (%v)", tc.pattern, se.Unsupported(), tc.unsupported, err)
		}
	}
}

// Schemas around a pattern: no string can satisfy it within the lengths,
// a pattern on a schema that allows no string, patterns merged by allOf,
// and enum values the pattern refuses.
func TestPatternInSchemas(t *testing.T) {
	tests := []compileCase{
		{name: "unsatisfiable lengths", schema: `{"type":"string","pattern":"^a{5}$","maxLength":4}`, keyword: "pattern", want: "no string of 0 to 4 characters matches"},
		{name: "parity", schema: `{"type":"string","pattern":"^(ab)*$","minLength":3,"maxLength":3}`, keyword: "pattern", want: "no string of 3 to 3 characters"},
		{name: "not a string", schema: `{"type":"string","pattern":1}`, keyword: "pattern", want: "pattern must be a string"},
		{name: "ignored on other types", schema: `{"type":"integer","pattern":"^a$"}`, accepts: []string{`1`}},
		{name: "beside other types", schema: `{"type":["string","null"],"pattern":"^a$"}`, accepts: []string{`null`, `"a"`}, refuses: []string{`"b"`}},
		{name: "allOf intersects patterns", schema: `{"allOf":[{"type":"string","pattern":"a"},{"pattern":"b"},{"pattern":"^.{2}$"}]}`, accepts: []string{`"ab"`, `"ba"`}, refuses: []string{`"aa"`, `"abc"`}},
		{name: "allOf with no common string", schema: `{"allOf":[{"type":"string","pattern":"^a+$"},{"pattern":"^b+$"}]}`, keyword: "pattern", want: `pattern "^a+$" with pattern "^b+$": no string`},
		{name: "enum filtered by pattern", schema: `{"enum":["ab","cd",1],"pattern":"^a"}`, accepts: []string{`"ab"`, `1`}, refuses: []string{`"cd"`}},
		{name: "in anyOf", schema: `{"anyOf":[{"type":"string","pattern":"^\\d+$"},{"type":"null"}]}`, accepts: []string{`"12"`, `null`}, refuses: []string{`"1a"`}},
		{name: "problem in a property", schema: `{"type":"object","properties":{"p":{"type":"string","pattern":"(?=x)"}}}`, keyword: "pattern", want: `at /properties/p/pattern`},
	}
	runCompileCases(t, tests)
}

// goComparable reports whether Go's regexp (RE2) reads pattern as
// ECMA-262 does, so the two can be compared on any string: no ., \s, \S,
// \v, escapes RE2 spells differently, POSIX classes, or braces that are not
// quantifiers.
func goComparable(pattern string) bool {
	for _, bad := range []string{".", `\s`, `\S`, `\v`, `\u`, `\c`, `\0`, `\x`, `\b`, `\B`, `\Q`, `(?P`, "[:"} {
		if strings.Contains(pattern, bad) {
			return false
		}
	}
	quantifiers := len(quantifierRE.FindAllString(pattern, -1))
	return strings.Count(pattern, "{") == quantifiers && strings.Count(pattern, "}") == quantifiers
}

var quantifierRE = regexp.MustCompile(`\{\d+(,\d*)?\}`)

// The automaton and Go's regexp agree on random strings, for patterns both
// read alike: a differential test of the whole chain (parser, NFA, byte
// spelling, DFA).
func TestPatternMatchesGoRegexp(t *testing.T) {
	patterns := []string{
		"a", "^a", "a$", "^a$", "ab|c", "^(ab|c)+$", "^a*b?c+$", "(a|b)*c", "^[abc]{2,3}$",
		`^\d{2}-\d{2}$`, `\w+@\w+`, `^[^a]*$`, `^(a|)b$`, "^$", "x|^y|z$", `^[a-c"\\]+$`,
		`^(?:a(?:b|c))*$`, "^é+ü?$", `^[\n\t]$`, "(^a|b)(c|d$)",
	}
	alphabet := []rune{'a', 'b', 'c', 'd', 'x', 'y', 'z', '1', '2', '-', '@', '"', '\\', '\n', '\t', 'é', 'ü', '😀'}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range patterns {
		if !goComparable(p) {
			t.Fatalf("pattern %q is not comparable with RE2", p)
		}
		re := regexp.MustCompile(p)
		s := mustCompile(t, patternSchema(p, ""))
		for i := 0; i < 400; i++ {
			r := make([]rune, rng.IntN(7))
			for j := range r {
				r[j] = alphabet[rng.IntN(len(alphabet))]
			}
			str := string(r)
			if got, want := accepts(s, jsonString(str)), re.MatchString(str); got != want {
				t.Fatalf("pattern %q on %q: automaton %v, regexp %v", p, str, got, want)
			}
		}
	}
}

// pattern schemas for random walks: each walk ends in a string the
// independent validator (Go's regexp) matches.
var patternWalkSchemas = []string{
	`{"type":"object","properties":{"phone":{"type":"string","pattern":"^\\d{3}-\\d{4}$"},"code":{"type":"string","pattern":"^[A-Z]{2}[0-9]+$","maxLength":6},"tag":{"type":"string","pattern":"ab"}},"required":["phone","code","tag"],"additionalProperties":false}`,
	`{"type":"array","items":{"type":"string","pattern":"^(x|yz)*$","minLength":2,"maxLength":5},"minItems":1,"maxItems":4}`,
	`{"type":"array","items":{"type":"string","pattern":"^[^a-z]*$"},"maxItems":3}`,
	`{"type":"string","pattern":"q$"}`,
}

func TestRandomWalksPattern(t *testing.T) {
	m, tok, endSet, walks := walkFixture(t, 20, 4)
	opts := smallOptions
	opts.MaxStringChars = 12
	for si, schemaJSON := range patternWalkSchemas {
		s, err := CompileWithOptions([]byte(schemaJSON), opts)
		if err != nil {
			t.Fatalf("schema %d: %v", si, err)
		}
		for w := 0; w < walks; w++ {
			rng := rand.New(rand.NewPCG(uint64(si), uint64(w)))
			doc := randomWalk(t, m, tok, s, rng, endSet, w%5 == 0)
			if w < 2 {
				t.Logf("schema %d walk %d: %s", si, w, doc)
			}
			checkDocument(t, schemaJSON, doc)
		}
	}
}

// FuzzPattern compiles arbitrary patterns: no panic, every error a
// *RegexError, and where Go's regexp reads the pattern alike, both agree on
// the fuzzed string.
//
//	go test -run '^$' -fuzz FuzzPattern ./pkg/jsonconstrain/
func FuzzPattern(f *testing.F) {
	for _, s := range []string{"^a+$", "(a|b)*c", `\d{2,4}`, `[^\w-]`, `(?:x)?y{2}`, `(?<n>a)\k<n>`, `a(?=b)`, `[\u0041-\u005a]`, `^.\s\S$`, "é|😀"} {
		f.Add(s, "aab")
	}
	f.Fuzz(func(t *testing.T, pattern, str string) {
		if len(pattern) > 64 || len(str) > 32 {
			return
		}
		if _, err := parseRegex(pattern, 256); err != nil {
			var re *RegexError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RegexError", err)
			}
			return
		}
		d, _, err := buildStringDFA([]patternSource{{regex: pattern, keyword: "pattern"}}, 0, 64, 256, 2048)
		if err != nil {
			return
		}
		goRE, goErr := regexp.Compile(pattern)
		if goErr != nil || !goComparable(pattern) || strings.ContainsRune(str, 0xFFFD) || !utf8.ValidString(str) {
			return
		}
		want := goRE.MatchString(str) && len([]rune(str)) <= 64
		s := &Schema{root: &node{types: tString, maxLen: 64, pat: d}, opts: DefaultOptions}
		if got := accepts(s, jsonString(str)); got != want {
			t.Fatalf("pattern %q on %q: automaton %v, regexp %v", pattern, str, got, want)
		}
	})
}

// Inside a patterned string far from maxLength, the mask comes from the
// per-DFA-state cache of plain tokens plus a walk of the rest: it equals
// the naive mask (every token tried on its own), on the first use of a
// state and from the cache after.
func TestPatternMaskCache(t *testing.T) {
	m, tok, endSet, _ := walkFixture(t, 0, 0)
	for _, schema := range []string{
		`{"type":"string","format":"uuid"}`,
		`{"type":"string","pattern":"^[a-z ]+(-[0-9]+)?$"}`,
		`{"type":"string","pattern":"the","minLength":5}`,
	} {
		s := mustCompile(t, schema)
		rng := rand.New(rand.NewPCG(3, 4))
		for walk := 0; walk < 3; walk++ {
			st := s.Start()
			var doc []byte
			var mk Mask
			for step := 0; step < 12; step++ {
				for again := 0; again < 2; again++ {
					m.Allowed(st, &mk)
					want := allowedNaive(tok, st, endSet)
					if mk.Count() != len(want) {
						t.Fatalf("%s after %q (pass %d): mask has %d tokens, naive %d", schema, doc, again, mk.Count(), len(want))
					}
					for id := range want {
						if !mk.Allows(id) {
							t.Fatalf("%s after %q: token %d (%q) missing", schema, doc, id, tok.TokenBytes(id))
						}
					}
				}
				var ids []int
				for id := 0; id < tok.IDCount(); id++ {
					if mk.Allows(id) && !endSet[id] {
						ids = append(ids, id)
					}
				}
				if len(ids) == 0 {
					break
				}
				id := ids[rng.IntN(len(ids))]
				if _, err := m.Accept(st, id); err != nil {
					t.Fatal(err)
				}
				doc = append(doc, tok.TokenBytes(id)...)
			}
		}
	}
	if len(m.patternPlain) == 0 {
		t.Fatal("the cache was never used")
	}
}

// The pattern cache is shared by every generation on a Masker: concurrent
// masks inside patterned strings agree with a serial one (run with -race).
func TestPatternMaskCacheConcurrent(t *testing.T) {
	m, _ := fixtureMasker(t)
	s := mustCompile(t, `{"type":"object","properties":{"d":{"type":"string","format":"date-time"}}}`)
	prefixes := []string{`{"d":"`, `{"d":"2`, `{"d":"2024-0`, `{"d":"2024-02-2`, `{"d":"2024-02-29T1`}
	want := make([]int, len(prefixes))
	for i, p := range prefixes {
		st := s.Start()
		st.AcceptBytes([]byte(p))
		var mk Mask
		m.Allowed(st, &mk)
		want[i] = mk.Count()
		m.patternMu.Lock()
		m.patternPlain = nil // each goroutine below fills the cache again
		m.patternMu.Unlock()
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mk Mask
			for i, p := range prefixes {
				st := s.Start()
				st.AcceptBytes([]byte(p))
				m.Allowed(st, &mk)
				if mk.Count() != want[i] {
					t.Errorf("after %s: %d tokens, want %d", p, mk.Count(), want[i])
				}
			}
		}()
	}
	wg.Wait()
}
