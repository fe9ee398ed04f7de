package toolconstrain

import (
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/synthvocab"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
)

// synthetic248k is a vocabulary the size of Qwen3.5's (248,320 ids), the
// shape pkg/jsonconstrain's benchmark masks over (every byte, words, JSON
// punctuation, digit and CJK runs), plus the markup pieces a byte-level
// BPE vocabulary has (<tool_call>, </, parameter, >\n, newline runs…).
var synthetic248k = sync.OnceValue(func() *byteVocab {
	toks := synthvocab.Tokens248k([]string{"<tool_call>", "</tool_call>", "<", "</", "<function", "<parameter", "parameter", "function",
		"=", ">", ">\n", "\n", "\n\n", "\n</", "\n<", "_call", "tool", "get", "_weather", "city", "days", "unit"}, 2)
	return &byteVocab{toks: toks, special: map[int]bool{len(toks) - 2: true, len(toks) - 1: true}}
})

// benchStates are positions in a call, from free text (a few tokens to
// check) through markup (a short trie walk) to values (a raw string, a
// bounded one, JSON).
var benchStates = []struct {
	name   string
	plan   Plan
	prefix string
	tools  string // "": testTools
}{
	{"text", Plan{Choice: Auto}, "Let me check the weather. ", ""},
	{"function-name", Plan{Choice: Auto}, "<tool_call>\n<function=get_", ""},
	{"parameter-name", Plan{Choice: Named, Name: "get_weather"}, "<parameter=", ""},
	{"raw-string", Plan{Choice: Named, Name: "get_weather"}, "<parameter=city>\nSan Fra", ""},
	{"raw-string-after-newline", Plan{Choice: Named, Name: "get_weather"}, "<parameter=city>\nSan\n", ""},
	{"bounded-string", Plan{Choice: Named, Name: "write_file"}, "<parameter=path>\n/tmp/", ""},
	{"json-integer", Plan{Choice: Named, Name: "get_weather"}, "<parameter=days>\n1", ""},
	{"json-object-string", Plan{Choice: Named, Name: "write_file"}, "<parameter=options>\n{\"tags\": [\"ab", ""},
	{"json-closed", Plan{Choice: Named, Name: "write_file"}, "<parameter=options>\n{\"mode\": 1}", ""},
	// Raw strings with a pattern or format: the first Mask in a state
	// builds its table (first-ns), later ones copy it.
	{"raw-pattern-date", Plan{Choice: Named, Name: "book"}, "<parameter=day>\n2024-0", patternTools},
	{"raw-pattern-uri-bounded", Plan{Choice: Named, Name: "book"}, "<parameter=site>\nhttps://exa", patternTools},
	{"raw-pattern-email-start", Plan{Choice: Named, Name: "book"}, "<parameter=mail>\n", patternTools},
	{"raw-pattern-newlines", Plan{Choice: Named, Name: "book"}, "<parameter=memo>\na\n", patternTools},
}

// go test -run '^$' -bench Mask248k ./pkg/toolconstrain/
func BenchmarkMask248k(b *testing.B) {
	v := synthetic248k()
	tv := newTestVocab(b, v, []int{len(v.toks) - 2, len(v.toks) - 1})
	g := testGrammar(b)
	row := make([]float32, len(v.toks))
	for _, s := range benchStates {
		b.Run(s.name, func(b *testing.B) {
			s.plan.Grammar = g
			if s.tools != "" {
				g2, err := Compile(parseTools(b, s.tools))
				if err != nil {
					b.Fatal(err)
				}
				s.plan.Grammar = g2
			}
			c, err := tv.Constrain(s.plan)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(s.prefix); i++ {
				if _, err := c.Advance(int(s.prefix[i])); err != nil {
					b.Fatalf("prefix %q: %v", s.prefix[:i+1], err)
				}
			}
			clear(row)
			tv.patMu.Lock()
			tv.patTables = nil // first-ns: a table not built yet
			tv.patMu.Unlock()
			first := time.Now()
			allowed := c.Mask(row)
			firstNs := time.Since(first).Nanoseconds()
			b.ResetTimer()
			for range b.N {
				c.Mask(row)
			}
			b.ReportMetric(float64(allowed), "allowed")
			b.ReportMetric(float64(firstNs), "first-ns")
		})
	}
}

// The one-time cost per model: the tables NewVocab builds.
func BenchmarkNewVocab248k(b *testing.B) {
	v := synthetic248k()
	ends := []int{len(v.toks) - 2, len(v.toks) - 1}
	jm, err := jsonconstrain.NewMasker(v, ends)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := NewVocab(v, ends, jm); err != nil {
			b.Fatal(err)
		}
	}
}
