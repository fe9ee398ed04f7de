package toolconstrain

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixtok"
	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

// RandomTools is testTools with every raw string bounded, so that output
// from random weights, which writes a closing tag only by chance, still
// closes each value.
var RandomTools = toolList(`"city":{"type":"string","maxLength":10}`, "")

func fixtureTokenizer(t testing.TB) *tokenizer.Tokenizer { return fixtok.Tokenizer(t) }

func fixtureEnds(t testing.TB, tok *tokenizer.Tokenizer) []int { return fixtok.Ends(t, tok) }

// sampleConstrained generates from random logits (a fresh normal draw
// each step, softmax at temperature 1) under c until an end token or max
// tokens; with checkEvery > 0 it also checks at every checkEvery-th step
// that Mask allows exactly the tokens Advance takes.
func sampleConstrained(t *testing.T, c *Constraint, tok *tokenizer.Tokenizer, rng *rand.Rand, max int, checkEvery int) (string, bool) {
	t.Helper()
	n := tok.IDCount()
	var text []byte
	for step := 0; step < max; step++ {
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(rng.NormFloat64() * 2)
		}
		if checkEvery > 0 && step%checkEvery == 0 {
			probe := make([]float32, n)
			c.Mask(probe)
			for id := range probe {
				_, err := clone(c).Advance(id)
				if allowed := !math.IsInf(float64(probe[id]), -1); allowed != (err == nil) {
					t.Fatalf("after %q: token %d (%q) allowed=%v, Advance: %v", text, id, tok.TokenBytes(id), allowed, err)
				}
			}
		}
		id, ended := takeSample(t, c, row, rng, text)
		if ended {
			return string(text), true
		}
		text = append(text, tok.TokenBytes(id)...)
	}
	return string(text), false
}

// maskCheckEvery is how often a sampled-call test's generation of seed
// checks Mask against Advance on every token: never but at seed 0, there at
// every step, or every fourth under the race detector (or -short), which
// slows the check by an order of magnitude and has nothing to race in it;
// scripts/test.sh runs these tests without it too.
func maskCheckEvery(seed int) int {
	switch {
	case seed != 0:
		return 0
	case testfix.Quick(raceEnabled):
		return 4
	}
	return 1
}

// takeSample masks row under c, samples a token from it at temperature 1
// and advances c over it; a dead end or a refused token fails t.
func takeSample(t *testing.T, c *Constraint, row []float32, rng *rand.Rand, text []byte) (id int, ended bool) {
	t.Helper()
	if c.Mask(row) == 0 {
		t.Fatalf("dead end after %q", text)
	}
	id = sampleSoftmax(row, rng)
	ended, err := c.Advance(id)
	if err != nil {
		t.Fatalf("after %q: %v", text, err)
	}
	return id, ended
}

func sampleSoftmax(row []float32, rng *rand.Rand) int {
	top := float32(math.Inf(-1))
	for _, x := range row {
		top = max(top, x)
	}
	var sum float64
	for _, x := range row {
		sum += math.Exp(float64(x - top))
	}
	r := rng.Float64() * sum
	last := 0
	for i, x := range row {
		if math.IsInf(float64(x), -1) {
			continue
		}
		last = i
		if r -= math.Exp(float64(x - top)); r <= 0 {
			return i
		}
	}
	return last
}

// CheckCalls parses text as the server does and checks that every call
// names one of tools and that its arguments validate against that tool's
// parameters schema (santhosh-tekuri/jsonschema, independent of the
// automaton). It returns the calls.
func CheckCalls(tools []Tool, prefix, text string) ([]chatparse.ToolCall, error) {
	var pt []chatparse.Tool
	schemas := map[string]*jsonschema.Schema{}
	for i, tl := range tools {
		pt = append(pt, chatparse.Tool{Name: tl.Name, Parameters: tl.Parameters})
		var doc any
		if err := json.Unmarshal(tl.Parameters, &doc); err != nil {
			return nil, err
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		url := fmt.Sprintf("tool%d.json", i)
		if err := c.AddResource(url, doc); err != nil {
			return nil, err
		}
		s, err := c.Compile(url)
		if err != nil {
			return nil, err
		}
		schemas[tl.Name] = s
	}
	p := chatparse.New(chatparse.Options{Tools: pt})
	p.Push(prefix)
	p.Push(text)
	p.Finish()
	res := p.Result()
	for _, call := range res.ToolCalls {
		s, ok := schemas[call.Name]
		if !ok {
			return nil, fmt.Errorf("call of %q, not a declared tool", call.Name)
		}
		var args any
		if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil {
			return nil, fmt.Errorf("arguments %s of %s: %v", call.Arguments, call.Name, err)
		}
		if err := s.Validate(args); err != nil {
			return nil, fmt.Errorf("arguments %s of %s: %v", call.Arguments, call.Name, err)
		}
	}
	if strings.Contains(res.Content, "<tool_call>") {
		return nil, fmt.Errorf("call markup left in the content %q", res.Content)
	}
	return res.ToolCalls, nil
}

// randomSetup is the fixture tokenizer, its Vocab, the tools of raw and
// their grammar.
func randomSetup(t *testing.T, raw string) (*tokenizer.Tokenizer, *Vocab, []Tool, *Grammar) {
	t.Helper()
	tok := fixtureTokenizer(t)
	tv := newTestVocab(t, tok, fixtureEnds(t, tok))
	tools, g := compileTools(t, raw)
	return tok, tv, tools, g
}

// checkConcurrentGenerations samples plan on 4 goroutines that share tv
// (random weights, PCG stream stream, at most max tokens each) and checks
// that every text is calls of tools after prefix.
func checkConcurrentGenerations(t *testing.T, tok *tokenizer.Tokenizer, tv *Vocab, tools []Tool, plan Plan, stream uint64, max int, prefix string) {
	t.Helper()
	var wg sync.WaitGroup
	texts := make([]string, 4)
	for w := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tv.Constrain(plan)
			if err != nil {
				t.Error(err)
				return
			}
			texts[w], _ = sampleConstrained(t, c, tok, rand.New(rand.NewPCG(uint64(w), stream)), max, 0)
		}()
	}
	wg.Wait()
	for _, text := range texts {
		if _, err := CheckCalls(tools, prefix, text); err != nil {
			t.Fatalf("%v in %q", err, text)
		}
	}
}

// Random weights, temperature 1, 20 seeds (4 under -race or -short):
// forced calls (required and named, one and several), and a call the text
// opens under tool_choice auto, always parse, name a declared tool and
// validate; at seed 0 every step (every fourth under -race or -short) also
// checks Mask against Advance on every token.
func TestRandomForcedCallsValidate(t *testing.T) {
	seeds := 20
	if testfix.Quick(raceEnabled) {
		seeds = 4
	}
	tok, tv, tools, g := randomSetup(t, RandomTools)
	plans := []struct {
		plan   Plan
		prefix string
		opener string // auto: text the test writes before sampling, opening a call
	}{
		{Plan{Choice: Auto, Parallel: true}, "", "Checking.<tool_call>\n<function="},
		{Plan{Choice: Required}, "<tool_call>\n", ""},
		{Plan{Choice: Required, Parallel: true}, "<tool_call>\n", ""},
		{Plan{Choice: Named, Name: "write_file"}, "<tool_call>\n<function=write_file>\n", ""},
		{Plan{Choice: Named, Name: "search"}, "<tool_call>\n<function=search>\n", ""},
	}
	for pi, pl := range plans {
		pl.plan.Grammar = g
		for seed := range seeds {
			t.Run(fmt.Sprintf("%d-%s-parallel=%v/seed%d", pi, pl.plan.Name, pl.plan.Parallel, seed), func(t *testing.T) {
				t.Parallel() // sharing tv and g as concurrent requests do; see TestCorpusForcedCallsValidate
				c, err := tv.Constrain(pl.plan)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(pi)))
				for _, id := range tok.Encode(pl.opener) {
					if _, err := c.Advance(id); err != nil {
						t.Fatalf("opener token %d: %v", id, err)
					}
				}
				text, ended := sampleConstrained(t, c, tok, rng, 2000, maskCheckEvery(seed))
				text = pl.opener + text
				if !ended {
					t.Fatalf("no end within 2000 tokens: %q", text)
				}
				calls, err := CheckCalls(tools, pl.prefix, text)
				if err != nil {
					t.Fatalf("%v in %q", err, text)
				}
				if len(calls) == 0 || !pl.plan.Parallel && len(calls) > 1 {
					t.Fatalf("%d calls in %q", len(calls), text)
				}
				if pl.plan.Name != "" && calls[0].Name != pl.plan.Name {
					t.Fatalf("called %s, want %s", calls[0].Name, pl.plan.Name)
				}
			})
		}
	}
}

// Generations on several goroutines share one Vocab (serve --parallel):
// its lazily built tables are safe to share (run with -race).
func TestConcurrentGenerationsShareVocab(t *testing.T) {
	tok, tv, tools, g := randomSetup(t, RandomTools)
	checkConcurrentGenerations(t, tok, tv, tools, Plan{Grammar: g, Choice: Required}, 7, 2000, "<tool_call>\n")
}
