package toolconstrain

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

// patternTools have raw string parameters with patterns and formats; the
// unbounded formats get a maxLength so that random output closes them.
const patternTools = `[
 {"name":"book","parameters":{"type":"object","properties":{
   "day":{"type":"string","format":"date"},
   "at":{"type":"string","format":"date-time"},
   "id":{"type":"string","format":"uuid"},
   "mail":{"type":"string","format":"email","maxLength":24},
   "site":{"type":"string","format":"uri","maxLength":24},
   "ip":{"type":"string","format":"ipv4"},
   "code":{"type":"string","pattern":"^[A-Z]{3}-\\d{2,4}$"},
   "tag":{"type":"string","pattern":"^#[a-z]","minLength":3,"maxLength":8},
   "memo":{"type":"string","pattern":"^(a|\\n|<|/|p)*$","maxLength":14},
   "size":{"type":"string","enum":["small","large","xl"],"pattern":"^[a-z]{4,}$"}},
  "required":["day","id","code"]}}
]`

func patternGrammar(t testing.TB) *Grammar { return strictGrammar(t, patternTools) }

// rawValueTaken feeds "<parameter=P>\nVALUE\n</parameter>\n" a byte at a
// time and reports whether every byte is allowed and taken.
func rawValueTaken(t *testing.T, tv *Vocab, v *byteVocab, g *Grammar, param, value string) bool {
	t.Helper()
	c, err := tv.Constrain(Plan{Grammar: g, Choice: Named, Name: "book"})
	if err != nil {
		t.Fatal(err)
	}
	text := "<parameter=" + param + ">\n" + value + "\n</parameter>\n"
	for i := 0; i < len(text); i++ {
		ok, _ := allowedRow(c, v.IDCount())
		_, err := c.Advance(int(text[i]))
		if ok[text[i]] != (err == nil) {
			t.Fatalf("%s: after %q: mask %v, Advance %v", param, text[:i], ok[text[i]], err)
		}
		if err != nil {
			return false
		}
	}
	return true
}

func TestRawPatternValues(t *testing.T) {
	v := newByteVocab()
	tv := newTestVocab(t, v, []int{v.end()})
	g := patternGrammar(t)
	for _, tc := range []struct {
		param  string
		accept []string
		refuse []string
	}{
		{"day", []string{"2024-02-29", "2000-01-31"}, []string{"2023-02-29", "2024-1-01", "2024-01-01 ", "", "2024-01-01\n"}},
		{"at", []string{"2024-05-01T12:30:00Z", "2024-05-01T12:30:00.25-07:00"}, []string{"2024-05-01T12:30:00", "2024-05-01T12:60:00Z"}},
		{"id", []string{"123e4567-e89b-12d3-a456-426614174000"}, []string{"123e4567-e89b-12d3-a456-42661417400", "not-a-uuid"}},
		{"mail", []string{"a@b.co", "first.last@example.org"}, []string{"a@b@c", "@b.co", "a@", "waytoolong.address@example.org"}},
		{"site", []string{"https://example.com/a", "urn:x:y"}, []string{"example.com", "http://a b", "https://example.com/abcdefghij"}},
		{"ip", []string{"192.168.1.1"}, []string{"192.168.1.256", "1.2.3"}},
		{"code", []string{"ABC-12", "XYZ-1234"}, []string{"AB-12", "ABC-1", "ABC-12345", "abc-12"}},
		{"tag", []string{"#ab", "#a b c d", "#x</par"}, []string{"#a", "ab", "#abcdefgh"}},
		// The closing tag's prefixes are value when the tag breaks off;
		// the markup a value may not hold stays refused.
		{"memo", []string{"", "a", "\n", "a\n\na", "\n</p", "<p/a", "a\n<pa"}, []string{"a\n</parameter>", "</parameter>", "b"}},
		{"size", []string{"small", "large"}, []string{"xl", "smal"}},
	} {
		for _, s := range tc.accept {
			if !rawValueTaken(t, tv, v, g, tc.param, s) {
				t.Errorf("%s refuses %q", tc.param, s)
			}
		}
		for _, s := range tc.refuse {
			if rawValueTaken(t, tv, v, g, tc.param, s) {
				t.Errorf("%s accepts %q", tc.param, s)
			}
		}
	}
}

// Mask and Advance agree on every token at every step of patterned values,
// with multi-byte tokens that hold the closing tag, or part of it, beside
// value bytes.
func TestPatternMaskAgreesWithAdvance(t *testing.T) {
	v := newByteVocab(append(markupTokens, "2024", "-02-", "29\n</parameter>\n", "12\n</", "a\n<", "\n</p", "aaaaaaaa", "ABC-", "com", "@ex")...)
	tv := newTestVocab(t, v, []int{v.end()})
	g := patternGrammar(t)
	text := "<parameter=day>\n2024-02-29\n</parameter>\n<parameter=memo>\na\n</pa\n<p/aa\n</parameter>\n<parameter=code>\nABC-12\n</parameter>\n" +
		"<parameter=mail>\nx@ex.com\n</parameter>\n<parameter=tag>\n#a</par\n</parameter>\n<parameter=id>\n123e4567-e89b-12d3-a456-426614174000\n</parameter>\n</function>\n</tool_call>"
	c, err := tv.Constrain(Plan{Grammar: g, Choice: Named, Name: "book"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= len(text); i++ {
		ok, count := allowedRow(c, v.IDCount())
		n := 0
		for id := range ok {
			_, err := clone(c).Advance(id)
			if ok[id] != (err == nil) {
				t.Fatalf("after %q: token %d (%q) mask %v, Advance error %v", text[:i], id, v.toks[id], ok[id], err)
			}
			if ok[id] {
				n++
			}
		}
		if n != count || n == 0 {
			t.Fatalf("after %q: Mask reports %d allowed, %d are", text[:i], count, n)
		}
		if i < len(text) {
			if _, err := c.Advance(int(text[i])); err != nil {
				t.Fatalf("after %q: %v", text[:i], err)
			}
		}
	}
}

// Random weights, temperature 1, 20 seeds (4 under -race or -short):
// forced calls of a tool whose string parameters carry patterns and formats
// parse and validate, formats asserted; at seed 0 every step (every fourth
// under -race or -short) also checks Mask against Advance on every token of
// the fixture vocabulary.
func TestRandomPatternCallsValidate(t *testing.T) {
	seeds := 20
	if testfix.Quick(raceEnabled) {
		seeds = 4
	}
	tok, tv, tools, g := randomSetup(t, patternTools)
	requireNoFallbacks(t, g)
	for _, choice := range []Choice{Named, Required} {
		for seed := range seeds {
			t.Run(fmt.Sprintf("choice%d/seed%d", choice, seed), func(t *testing.T) {
				t.Parallel() // sharing tv and g as concurrent requests do; see TestCorpusForcedCallsValidate
				c, err := tv.Constrain(Plan{Grammar: g, Choice: choice, Name: "book"})
				if err != nil {
					t.Fatal(err)
				}
				prefix := "<tool_call>\n"
				if choice == Named {
					prefix += "<function=book>\n"
				}
				rng := rand.New(rand.NewPCG(uint64(seed), 41+uint64(choice)))
				text, ended := sampleConstrained(t, c, tok, rng, 3000, maskCheckEvery(seed))
				if !ended {
					t.Fatalf("no end within 3000 tokens: %q", text)
				}
				calls, err := CheckCalls(tools, prefix, text)
				if err != nil {
					t.Fatalf("%v in %q", err, text)
				}
				if len(calls) != 1 || calls[0].Name != "book" {
					t.Fatalf("calls %+v in %q", calls, text)
				}
			})
		}
	}
}

// Generations on several goroutines share one Vocab's pattern tables,
// built lazily and reset past maxPatTables (run with -race).
func TestConcurrentPatternTables(t *testing.T) {
	tok, tv, tools, g := randomSetup(t, patternTools)
	requireNoFallbacks(t, g)
	checkConcurrentGenerations(t, tok, tv, tools, Plan{Grammar: g, Choice: Named, Name: "book"}, 8, 3000, "<tool_call>\n<function=book>\n")
}
