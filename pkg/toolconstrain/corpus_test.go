package toolconstrain

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/corpus"
)

var update = flag.Bool("update", false, "rewrite testdata/corpus-fallbacks.golden")

// corpusToolLists are the tool lists of pkg/jsonconstrain's corpus of real
// schemas (internal/testfix/corpus), by file name.
func corpusToolLists(t testing.TB) map[string][]Tool {
	t.Helper()
	lists := map[string][]Tool{}
	for _, f := range corpus.Files(t) {
		for _, tl := range f.Tools {
			lists[f.Name] = append(lists[f.Name], Tool{Name: tl.Name, Parameters: tl.InputSchema})
		}
	}
	return lists
}

// Every tool list of the corpus compiles; the parameters whose values
// are left free, and why, are those in testdata/corpus-fallbacks.golden
// (go test -run Corpus ./pkg/toolconstrain/ -update rewrites it).
func TestCorpusCompiles(t *testing.T) {
	lists := corpusToolLists(t)
	names := make([]string, 0, len(lists))
	for n := range lists {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	for _, n := range names {
		g, err := Compile(lists[n])
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		params := 0
		for _, tl := range g.tools {
			params += len(tl.params)
		}
		fmt.Fprintf(&b, "%s: %d tools, %d parameters, %d left free\n", n, len(g.tools), params, len(g.Fallbacks))
		for _, f := range g.Fallbacks {
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	golden := filepath.Join("testdata", "corpus-fallbacks.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, b.Bytes()) {
		t.Fatalf("the corpus compiles to:\n%s\nwant (%s):\n%s", b.Bytes(), golden, want)
	}
}

// Forced calls of every tool of the corpus, sampled from random logits at
// temperature 1 with a nudge towards closing (tokens with a quote,
// bracket, angle bracket, slash or newline get +4, and in a raw value the
// tokens that take a step towards its closing tag +8, so that strings
// without a bound end), 2 seeds each (1 under -race or -short): every call
// parses, names the tool, and its arguments validate against the tool's
// schema, less the parameters left free.
func TestCorpusForcedCallsValidate(t *testing.T) {
	seeds := 2
	if testfix.Quick(raceEnabled) {
		seeds = 1
	}
	tok := fixtureTokenizer(t)
	tv := newTestVocab(t, tok, fixtureEnds(t, tok))
	nudge := make([]float32, tok.IDCount())
	for id := range nudge {
		if bytes.ContainsAny(tok.TokenBytes(id), "\"]}<>/\n") {
			nudge[id] = 4
		}
	}
	lists := corpusToolLists(t)
	for file, tools := range lists {
		g, err := Compile(tools)
		if err != nil {
			t.Fatal(err)
		}
		checked := withoutFallbacks(t, tools, g)
		for _, tl := range g.tools {
			for seed := range seeds {
				t.Run(fmt.Sprintf("%s/%s/seed%d", file, tl.name, seed), func(t *testing.T) {
					// In parallel: the generations share tv and g as the
					// server's concurrent requests do (checked under -race),
					// and use both cores where this package runs alone, at
					// the end of the race run.
					t.Parallel()
					c, err := tv.Constrain(Plan{Grammar: g, Choice: Named, Name: tl.name})
					if err != nil {
						t.Fatal(err)
					}
					rng := rand.New(rand.NewPCG(uint64(seed), 40))
					text, ended := sampleNudged(t, c, tok.IDCount(), func(id int) []byte { return tok.TokenBytes(id) }, nudge, rng, 4000)
					if !ended {
						t.Fatalf("no end within 4000 tokens: %q", text)
					}
					calls, err := CheckCalls(checked, "<tool_call>\n<function="+tl.name+">\n", text)
					if err != nil {
						t.Fatalf("%v in %q", err, text)
					}
					if len(calls) != 1 || calls[0].Name != tl.name {
						t.Fatalf("calls %+v", calls)
					}
				})
			}
		}
	}
}

func sampleNudged(t *testing.T, c *Constraint, n int, bytesOf func(int) []byte, nudge []float32, rng *rand.Rand, max int) (string, bool) {
	t.Helper()
	var text []byte
	row := make([]float32, n)
	for range max {
		for i := range row {
			row[i] = float32(rng.NormFloat64()*2) + nudge[i]
		}
		if c.st.ph == pRaw {
			// A raw value ends only with "\n</parameter>", several tokens
			// in a row: the tokens that take a step towards it get +20.
			depth := c.m.endDepth(&c.st)
			for id := range row {
				s := c.st
				if c.run(&s, bytesOf(id)) && (s.ph != pRaw || c.m.endDepth(&s) > depth) {
					row[id] += 20
				}
			}
		}
		id, ended := takeSample(t, c, row, rng, text)
		if ended {
			return string(text), true
		}
		text = append(text, bytesOf(id)...)
	}
	return string(text), false
}

// withoutFallbacks is tools with the schema of each parameter the grammar
// leaves free replaced by true: its value is not the constraint's to
// guarantee.
func withoutFallbacks(t *testing.T, tools []Tool, g *Grammar) []Tool {
	t.Helper()
	var out []Tool
	for _, tl := range tools {
		var schema map[string]any
		if err := json.Unmarshal(tl.Parameters, &schema); err != nil {
			t.Fatal(err)
		}
		props, _ := schema["properties"].(map[string]any)
		for _, f := range g.Fallbacks {
			if name, ok := strings.CutPrefix(f, tl.Name+"."); ok {
				name, _, _ = strings.Cut(name, ": ")
				props[name] = true
			}
		}
		raw, err := json.Marshal(schema)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Tool{Name: tl.Name, Parameters: raw})
	}
	return out
}
