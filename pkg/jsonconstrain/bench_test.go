package jsonconstrain

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/synthvocab"
	"github.com/nvmai/nvmai/internal/testfix/corpus"
	"github.com/nvmai/nvmai/pkg/sample"
)

// synthetic248k is a vocabulary the size of Qwen3.5's (248,320 ids): the
// fixture's tokens, every single byte, then words, JSON punctuation runs,
// digit runs and CJK runs, so that shared prefixes and the share of
// tokens a string accepts resemble a real byte-level BPE vocabulary.
var synthetic248k = sync.OnceValue(func() *synthVocab {
	toks := synthvocab.Tokens248k(nil, 0)
	return &synthVocab{toks: toks, special: map[int]bool{len(toks) - 2: true, len(toks) - 1: true}}
})

// maskStates are the positions the benchmarks mask from, from the
// cheapest (few tokens fit) to the dearest (inside a string nearly all do).
var maskStates = []struct{ name, schema, prefix string }{
	{"after-value", personSchema, `{"name":"Al"`},
	{"object-key", "", `{"a":1,"`},
	{"number", "", `{"a":12`},
	{"string", "", `{"a":"the `},
	{"string-mid-utf8", "", "{\"a\":\"\xe4"},
	{"string-escape", "", `{"a":"\\`},
	// patterned strings: plain tokens from the per-DFA-state cache (filled
	// by the call before the timer starts), the rest walked
	{"string-pattern", `{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z ]+$"}}}`, `{"a":"the `},
	{"string-date-time", `{"type":"object","properties":{"a":{"type":"string","format":"date-time"}}}`, `{"a":"2024-01-`},
}

func benchmarkAllowed(b *testing.B, v Vocabulary, ends []int) {
	m, err := NewMasker(v, ends)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range maskStates {
		b.Run(s.name, func(b *testing.B) {
			st := mustCompile(b, s.schema).Start()
			if !st.AcceptBytes([]byte(s.prefix)) {
				b.Fatalf("prefix %q refused", s.prefix)
			}
			var mk Mask
			m.Allowed(st, &mk)
			b.ReportMetric(float64(mk.Count()), "allowed")
			b.ResetTimer()
			for range b.N {
				m.Allowed(st, &mk)
			}
		})
	}
}

// go test -run '^$' -bench Allowed ./pkg/jsonconstrain/
func BenchmarkAllowedFixture(b *testing.B) {
	_, ends := fixtureMasker(b)
	benchmarkAllowed(b, fixtureTokenizer(b), ends)
}

func BenchmarkAllowedSynthetic248k(b *testing.B) {
	v := synthetic248k()
	benchmarkAllowed(b, v, []int{len(v.toks) - 2, len(v.toks) - 1})
}

// BenchmarkAllowedNaive248k is the per-token walk the trie replaces, for
// the ratio.
func BenchmarkAllowedNaive248k(b *testing.B) {
	v := synthetic248k()
	st := mustCompile(b, "").Start()
	st.AcceptBytes([]byte(`{"a":"the `))
	b.ResetTimer()
	for range b.N {
		n := 0
		for id := range v.toks {
			t := v.toks[id]
			mark, top := len(st.m.f), st.top
			ok := true
			for _, c := range t {
				if top = st.m.step(top, c); top < 0 {
					ok = false
					break
				}
			}
			st.m.f = st.m.f[:mark]
			if ok {
				n++
			}
		}
	}
}

func BenchmarkNewMasker248k(b *testing.B) {
	v := synthetic248k()
	for range b.N {
		if _, err := NewMasker(v, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// stepDocument is what BenchmarkConstraintStep248k generates: nested
// objects, an array, strings with spaces and CJK, numbers and an enum.
const stepDocument = `{"name":"the quick brown fox","age":42,"tags":["red","green"],` +
	`"address":{"street":"main road 12","city":"東京都"},"ok":true,"score":-3.25e2,"kind":"b"}`

// synthByText maps each token's text of synthetic248k to its first id,
// for greedyTokens; longest is the longest token in bytes.
var synthByText = sync.OnceValues(func() (map[string]int, int) {
	v := synthetic248k()
	byText := map[string]int{}
	longest := 0
	for id, t := range v.toks {
		if !v.special[id] {
			if _, dup := byText[string(t)]; !dup {
				byText[string(t)] = id
			}
			longest = max(longest, len(t))
		}
	}
	return byText, longest
})

// greedyTokens splits doc by longest match over synthetic248k's tokens
// (v), roughly what a model's tokens look like.
func greedyTokens(v *synthVocab, doc string) []int {
	if v != synthetic248k() {
		panic("greedyTokens splits over synthetic248k")
	}
	byText, longest := synthByText()
	var ids []int
	for len(doc) > 0 {
		for n := min(longest, len(doc)); n > 0; n-- {
			if id, ok := byText[doc[:n]]; ok {
				ids = append(ids, id)
				doc = doc[n:]
				break
			}
		}
	}
	return ids
}

// BenchmarkConstraintStep248k is the whole per-token cost structured
// output adds to a generation on a Qwen-sized vocabulary: the mask
// (Allowed, or the end tokens once the document is closed), applying it
// to a 248,320-logit row, and advancing over the picked token, averaged
// over the tokens of stepDocument. apply-* is Mask.Apply alone (inside a
// string most tokens are allowed, after a value few), greedy-reference the
// sampler's argmax over the same row.
func BenchmarkConstraintStep248k(b *testing.B) {
	v := synthetic248k()
	m, err := NewMasker(v, []int{len(v.toks) - 2, len(v.toks) - 1})
	if err != nil {
		b.Fatal(err)
	}
	schema := mustCompile(b, `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
		"tags":{"type":"array","items":{"type":"string"}},"address":{"type":"object","properties":{"street":{"type":"string"},
		"city":{"type":"string"}},"required":["street","city"],"additionalProperties":false},"ok":{"type":"boolean"},
		"score":{"type":"number"},"kind":{"enum":["a","b","c"]}},"required":["name","age","tags","address","kind"],"additionalProperties":false}`)
	ids := append(greedyTokens(v, stepDocument), len(v.toks)-2)
	logits := make([]float32, len(v.toks))
	b.Run("step", func(b *testing.B) {
		for range b.N {
			c := m.Constrain(schema)
			for _, id := range ids {
				if c.Mask(logits) == 0 {
					b.Fatal("dead end")
				}
				if _, err := c.Advance(id); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids))/1e3, "µs/token")
		b.ReportMetric(float64(len(ids)), "tokens/doc")
	})
	// The sampler's cheapest pick on the same row, for the ratio.
	b.Run("greedy-reference", func(b *testing.B) {
		for i := range logits {
			logits[i] = float32(i % 977)
		}
		for range b.N {
			if _, err := sample.Greedy(logits); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, at := range []struct{ name, prefix string }{{"apply-in-string", `{"name":"the `}, {"apply-after-value", `{"name":"the"`}} {
		b.Run(at.name, func(b *testing.B) {
			var mk Mask
			st := schema.Start()
			st.AcceptBytes([]byte(at.prefix))
			m.Allowed(st, &mk)
			b.ReportMetric(float64(mk.Count()), "allowed")
			for range b.N {
				mk.Apply(logits)
			}
		})
	}
}

// BenchmarkNewMaskerFixture is the Masker a server builds for the tiny
// fixture's 4,103-id tokenizer.
func BenchmarkNewMaskerFixture(b *testing.B) {
	tok := fixtureTokenizer(b)
	for range b.N {
		if _, err := NewMasker(tok, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCorpusMask248k is issue #40's cost criterion: for every corpus
// schema nvmai compiles (testdata/corpus), what structured output adds to
// one generated token on a Qwen-sized vocabulary (248,320 logits):
// Constraint.Mask (the automaton's Allowed over the vocabulary trie, then
// Mask.Apply on the row) and Advance over the picked token. It reports
// per step of a document of that schema the median over the b.N
// documents (µs/step), the mean, and the slowest single step. The
// document is one a random-logit model wrote over the fixture vocabulary
// (seed 0, TestCorpusRandomGenerationValidates' limits), re-split by
// longest match into synthetic248k's tokens and followed by an end token;
// the schema is compiled under DefaultOptions, as the server compiles it.
// scripts/mask-cost.sh runs it and compares each schema with a decode
// step.
func BenchmarkCorpusMask248k(b *testing.B) {
	v := synthetic248k()
	end := len(v.toks) - 2
	m, err := NewMasker(v, []int{end, len(v.toks) - 1})
	if err != nil {
		b.Fatal(err)
	}
	fixture, _ := fixtureMasker(b)
	tok := fixtureTokenizer(b)
	logits := make([]float32, len(v.toks))
	for _, cs := range corpus.Schemas(b) {
		s, err := Compile(cs.Schema)
		if err != nil {
			continue // refused: nothing to mask
		}
		var short *Schema
		for _, o := range corpusOptions {
			if short, err = CompileWithOptions(cs.Schema, o); err == nil {
				break
			}
		}
		doc, ended := randomLogitDocument(b, fixture, tok, short, 0, corpusMaxTokens)
		if !ended {
			b.Fatalf("%s: no document within %d tokens", cs.Name, corpusMaxTokens)
		}
		ids := append(greedyTokens(v, string(doc)), end)
		b.Run(strings.ReplaceAll(cs.Name, "/", "."), func(b *testing.B) {
			var slowest time.Duration
			perDoc := make([]time.Duration, 0, b.N)
			for range b.N {
				c := m.Constrain(s)
				docStart := time.Now()
				for _, id := range ids {
					start := time.Now()
					if c.Mask(logits) == 0 {
						b.Fatalf("dead end in %q", doc)
					}
					if _, err := c.Advance(id); err != nil {
						b.Fatalf("%v in %q", err, doc)
					}
					slowest = max(slowest, time.Since(start))
				}
				perDoc = append(perDoc, time.Since(docStart))
			}
			// The median document: on a shared machine another process's
			// time slice lands in a few documents, and would swamp a mean.
			slices.Sort(perDoc)
			perStep := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(len(ids)) / 1e3 }
			b.ReportMetric(perStep(perDoc[len(perDoc)/2]), "µs/step")
			b.ReportMetric(perStep(b.Elapsed())/float64(b.N), "mean-µs/step")
			b.ReportMetric(float64(slowest.Nanoseconds())/1e3, "max-µs/step")
			b.ReportMetric(float64(len(ids)), "steps")
		})
	}
}
