package jsonconstrain

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/corpus"
	"github.com/nvmai/nvmai/pkg/sample"
)

var updateCorpus = flag.Bool("update", false, "rewrite testdata/corpus.golden from what the corpus compiles to")

// corpusVerdict is what the golden file records for one schema:
// "compiled", or "refused: " and the keywords the error names.
func corpusVerdict(t *testing.T, c corpus.Schema) (string, *Schema) {
	s, err := Compile(c.Schema)
	if err == nil {
		return "compiled", s
	}
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Errorf("%s: the error is a %T, not a *SchemaError: %v", c.Name, err, err)
		return "error: " + err.Error(), nil
	}
	var kws []string
	for _, p := range se.Problems {
		if p.Keyword == "" {
			t.Errorf("%s: refused without naming a keyword: %s", c.Name, p.Message)
			kws = append(kws, "(none)")
			continue
		}
		kws = append(kws, p.Keyword)
	}
	slices.Sort(kws)
	return "refused: " + strings.Join(slices.Compact(kws), ", "), nil
}

// Every corpus schema either compiles or is refused with the keyword
// named, and testdata/corpus.golden says which. After a change that
// compiles more of the corpus, regenerate it:
//
//	go test ./pkg/jsonconstrain -run Corpus -update
func TestCorpusCompiles(t *testing.T) {
	schemas := corpus.Schemas(t)
	var got strings.Builder
	compiled := 0
	for _, c := range schemas {
		v, _ := corpusVerdict(t, c)
		if v == "compiled" {
			compiled++
		}
		fmt.Fprintf(&got, "%s\t%s\n", c.Name, v)
	}
	t.Logf("%d schemas: %d compile, %d refused", len(schemas), compiled, len(schemas)-compiled)
	const golden = "testdata/corpus.golden"
	if *updateCorpus {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	if got.String() != string(want) {
		t.Errorf("the corpus compiles differently from %s (if the change is intended: go test ./pkg/jsonconstrain -run Corpus -update):\n%s",
			golden, lineDiff(string(want), got.String()))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if l != "" && !slices.Contains(g, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if l != "" && !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// corpusSeeds is how many generations each compiled corpus schema gets.
const corpusSeeds = 20

// corpusMaxTokens bounds one random generation under corpusOptions; a
// walk this long is a runaway the test reports.
const corpusMaxTokens = 20000

// corpusOptions are DefaultOptions with the lengths a document may run to
// cut down (strings, extra keys, arrays, nesting), tried in order. A
// random-logit model picks a string's closing quote about once in a few
// hundred tokens and opens any value an additionalProperties allows, so
// under the defaults (4,096 characters a string, 1,024 elements an array)
// its documents run to hundreds of thousands of tokens. The limits only
// tighten what the schema allows, so what the validator judges is the
// same. A schema that needs longer strings (a uuid or date-time format, a
// minLength) gets the second; one that needs more still, DefaultOptions.
var corpusOptions = func() []Options {
	short := DefaultOptions
	short.MaxDepth, short.MaxStringChars, short.MaxKeyBytes, short.MaxItems, short.MaxExtraProperties, short.MaxWhitespace = 8, 24, 32, 4, 2, 2
	longer := short
	longer.MaxStringChars = 64
	return []Options{short, longer, DefaultOptions}
}()

// randomLogitDocument generates one document of s the way the runtime
// does (Constraint.Mask, then the sampler at temperature 1, then
// Advance), from logits drawn afresh at every step: a model with random
// weights. It returns the text and whether an end token closed it.
func randomLogitDocument(t testing.TB, m *Masker, v Vocabulary, s *Schema, seed uint64, maxTokens int) ([]byte, bool) {
	rng := rand.New(rand.NewPCG(seed, 0x6a736f6e))
	smp, err := sample.New(sample.Params{Temperature: 1, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	c := m.Constrain(s)
	logits := make([]float32, v.IDCount())
	var doc []byte
	for range maxTokens {
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		if c.Mask(logits) == 0 {
			t.Fatalf("seed %d: dead end after %q", seed, doc)
		}
		id, err := smp.Sample(logits)
		if err != nil {
			t.Fatalf("seed %d: %v after %q", seed, err, doc)
		}
		ended, err := c.Advance(id)
		if err != nil {
			t.Fatalf("seed %d: the sampler picked a masked token %d after %q: %v", seed, id, doc, err)
		}
		if ended {
			return doc, true
		}
		doc = append(doc, v.TokenBytes(id)...)
	}
	return doc, false
}

// The acceptance at the package level: every compiled corpus
// schema, generated by a random-logit model at temperature 1 over the
// tiny fixture's real byte-level BPE vocabulary (4,103 ids), 20 seeds,
// gives documents the independent validator accepts, 100%.
// Under -short or -race 2 seeds run, unless NVMAI_LONG_TESTS is set.
func TestCorpusRandomGenerationValidates(t *testing.T) {
	m, _ := fixtureMasker(t)
	tok := fixtureTokenizer(t)
	seeds := corpusSeeds
	if testfix.Quick(raceEnabled) {
		seeds = 2
	}
	for _, c := range corpus.Schemas(t) {
		if _, err := Compile(c.Schema); err != nil {
			continue // refused: TestCorpusCompiles records it
		}
		t.Run(c.Name, func(t *testing.T) {
			var s *Schema
			for i, o := range corpusOptions {
				var err error
				if s, err = CompileWithOptions(c.Schema, o); err == nil {
					break
				}
				t.Logf("under limits %d: %v", i, err)
			}
			cv, err := corpus.NewValidator(c.Schema)
			if err != nil {
				t.Fatalf("the independent validator cannot compile the schema: %v", err)
			}
			for seed := range uint64(seeds) {
				doc, ended := randomLogitDocument(t, m, tok, s, seed, corpusMaxTokens)
				if !ended {
					t.Fatalf("seed %d: no end within %d tokens: %.300q…", seed, corpusMaxTokens, doc)
				}
				if seed == 0 {
					t.Logf("%s", doc)
				}
				if err := cv.Check(doc); err != nil {
					t.Errorf("seed %d: %s\ndoes not validate: %v", seed, doc, err)
				}
			}
		})
	}
}
