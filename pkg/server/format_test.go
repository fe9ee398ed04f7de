package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// petSchema has required string, integer, enum and array fields and a
// nested object. Lengths are bounded so that the near-random tiny model
// finishes a document well within max_tokens.
const petSchema = `{"type":"object","properties":{
	"name":{"type":"string","minLength":1,"maxLength":12},
	"age":{"type":"integer"},
	"kind":{"enum":["cat","dog","bird"]},
	"tags":{"type":"array","items":{"type":"string","maxLength":6},"minItems":1,"maxItems":3},
	"home":{"type":"object","properties":{"city":{"type":"string","maxLength":10},"zip":{"type":"integer"}},
		"required":["city","zip"],"additionalProperties":false}},
	"required":["name","age","kind","tags","home"],"additionalProperties":false}`

// checkPet validates doc against petSchema by hand, independently of the
// automaton that produced it.
func checkPet(doc string) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var p struct {
		Name *string      `json:"name"`
		Age  *json.Number `json:"age"`
		Kind *string      `json:"kind"`
		Tags []string     `json:"tags"`
		Home *struct {
			City *string      `json:"city"`
			Zip  *json.Number `json:"zip"`
		} `json:"home"`
	}
	if err := dec.Decode(&p); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one value")
	}
	switch {
	case p.Name == nil || utf8.RuneCountInString(*p.Name) < 1 || utf8.RuneCountInString(*p.Name) > 12:
		return fmt.Errorf("name %v", p.Name)
	case p.Age == nil || !isInteger(*p.Age):
		return fmt.Errorf("age %v", p.Age)
	case p.Kind == nil || !slices.Contains([]string{"cat", "dog", "bird"}, *p.Kind):
		return fmt.Errorf("kind %v", p.Kind)
	case len(p.Tags) < 1 || len(p.Tags) > 3 || slices.ContainsFunc(p.Tags, func(s string) bool { return utf8.RuneCountInString(s) > 6 }):
		return fmt.Errorf("tags %q", p.Tags)
	case p.Home == nil || p.Home.City == nil || utf8.RuneCountInString(*p.Home.City) > 10 || p.Home.Zip == nil || !isInteger(*p.Home.Zip):
		return fmt.Errorf("home %+v", p.Home)
	}
	return nil
}

func isInteger(n json.Number) bool {
	_, err := n.Int64()
	return err == nil || !bytes.ContainsAny([]byte(n), ".eE")
}

// boundedObjects is json_object with limits tight enough that a
// near-random model closes its document quickly.
var boundedObjects = jsonconstrain.Options{
	MaxDepth: 3, MaxStringChars: 8, MaxKeyBytes: 8, MaxItems: 3, MaxExtraProperties: 3,
	MaxNumberBytes: 8, MaxWhitespace: 2, MaxSchemaBytes: 1 << 16, MaxSchemaNodes: 256,
	MaxEnumValues: 16, MaxEnumBytes: 64, MaxObjectProperties: 64,
}

var formatSamplings = []sample.Params{
	{},
	{Temperature: 0.7, Seed: 1},
	{Temperature: 1, TopK: 50, TopP: 0.95, Seed: 2},
	{Temperature: 1.5, MinP: 0.02, PresencePenalty: 1, Seed: 3},
	{Temperature: 2, Seed: 4},
}

// The tiny model writes near-random text; constrained, every reply is a
// document that parses and validates, greedy and sampled, and ends on an
// end token (not max_tokens).
func TestRuntimeEngineFormatValidates(t *testing.T) {
	e := tinyEngine(t)
	r := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 16})
	pet, err := jsonconstrain.Compile(json.RawMessage(petSchema))
	if err != nil {
		t.Fatal(err)
	}
	formats := []struct {
		name   string
		schema *jsonconstrain.Schema
		check  func(string) error
	}{
		{"json_object", jsonconstrain.ObjectMode(boundedObjects), func(doc string) error {
			var v map[string]any
			return json.Unmarshal([]byte(doc), &v)
		}},
		{"json_schema", pet, checkPet},
	}
	prompt := e.Tokenizer.Encode("<|im_start|>user\nDescribe a pet as JSON.<|im_end|>\n<|im_start|>assistant\n")
	var masker *jsonconstrain.Masker
	defer func() {
		if masker == nil || r.format.masker != masker {
			t.Error("the Masker was not built once and kept for every request")
		}
	}()
	for _, f := range formats {
		for _, p := range formatSamplings {
			t.Run(fmt.Sprintf("%s/t%v-seed%d", f.name, p.Temperature, p.Seed), func(t *testing.T) {
				var text string
				out, err := r.Generate(context.Background(), Generation{Prompt: prompt, MaxTokens: 600, Sampling: p, Format: f.schema},
					func(s string) bool { text += s; return true })
				if err != nil {
					t.Fatal(err)
				}
				if masker == nil {
					masker = r.format.masker
				}
				if out.Finish != FinishEOS {
					t.Fatalf("finish %q after %d tokens: %q", out.Finish, out.CompletionTokens, text)
				}
				t.Logf("%d tokens: %q", out.CompletionTokens, text)
				if err := f.check(text); err != nil {
					t.Fatalf("%v in %q", err, text)
				}
			})
		}
	}
}

// Without a Format the engine passes no constraint: its text is that of a
// bare runtime session with the same settings, greedy and sampled.
func TestRuntimeEngineWithoutFormatUnchanged(t *testing.T) {
	e := tinyEngine(t)
	r := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 16})
	prompt := e.Tokenizer.Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
	for _, p := range formatSamplings {
		got, _ := collectWith(t, r, Generation{Prompt: prompt, MaxTokens: 24, Sampling: p})
		want, err := e.NewSession(runtime.SessionOptions{}).Generate(context.Background(), prompt,
			runtime.GenerateOptions{MaxTokens: 24, Sampling: p, StopIDs: r.stopIDs, PrefillChunk: 16})
		if err != nil {
			t.Fatal(err)
		}
		if got != want.Text {
			t.Fatalf("sampling %+v: %q, want %q", p, got, want.Text)
		}
	}
}

func collectWith(t *testing.T, r *RuntimeEngine, g Generation) (string, Outcome) {
	t.Helper()
	var text string
	out, err := r.Generate(context.Background(), g, func(s string) bool { text += s; return true })
	if err != nil {
		t.Fatal(err)
	}
	return text, out
}

// With thinking open, the reasoning is free (end tokens aside) until
// </think>, and the JSON constraint applies from the next token.
func TestAfterThinkLeavesReasoningFree(t *testing.T) {
	e := tinyEngine(t)
	tok := e.Tokenizer
	r := NewRuntimeEngine(e, RuntimeOptions{})
	c, err := r.format.constraint(tok, r.stopIDs, Generation{Format: jsonconstrain.ObjectMode(jsonconstrain.DefaultOptions), FormatAfterThink: true})
	if err != nil {
		t.Fatal(err)
	}
	thinkEnd, _ := tok.TokenID("</think>")
	vocab := tok.IDCount()
	allowed := func() []float32 {
		row := make([]float32, vocab)
		if c.Mask(row) == 0 {
			t.Fatal("dead end")
		}
		return row
	}
	inf := float32(math.Inf(-1))
	for _, id := range append(tok.Encode("no json here"), thinkEnd) {
		row := allowed()
		for _, end := range r.stopIDs {
			if row[end] != inf {
				t.Fatalf("end token %d allowed while reasoning", end)
			}
		}
		if row[id] == inf {
			t.Fatalf("reasoning token %d refused", id)
		}
		if _, err := c.Advance(id); err != nil {
			t.Fatal(err)
		}
	}
	row := allowed()
	if brace := tok.Encode("{"); row[brace[0]] == inf || row[tok.Encode("no")[0]] != inf {
		t.Fatal("after </think> the document must start: { allowed, text refused")
	}
}

func TestFormatRequestPrecedence(t *testing.T) {
	obj := jsonconstrain.ObjectMode(jsonconstrain.DefaultOptions)
	for _, mode := range []ToolChoiceMode{ToolRequired, ToolNamed} {
		if _, err := formatRequest(&ChatRequest{Format: obj, ToolChoice: mode}); err == nil {
			t.Fatalf("tool_choice %s with a Format accepted", mode)
		}
	}
	in := &ChatRequest{Format: obj, ToolChoice: ToolAuto, Stop: []string{"}"}}
	got, err := formatRequest(in)
	if err != nil || got.ToolChoice != ToolNone || got.Stop != nil || in.ToolChoice != ToolAuto || in.Stop == nil {
		t.Fatalf("auto with a Format: %+v %v (the request itself must stay as it was: %+v)", got, err, in)
	}
	free := &ChatRequest{ToolChoice: ToolRequired}
	if got, err := formatRequest(free); got != free || err != nil {
		t.Fatal("a request without Format changed")
	}
}

// A vocabulary with no end token cannot finish a document: once it has
// closed, the mask leaves nothing, and the request fails with
// ErrConstraintDeadEnd instead of sampling a refused token. The engine
// stays usable.
func TestRuntimeEngineFormatDeadEnd(t *testing.T) {
	e := tinyEngine(t)
	r := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 16})
	stops := r.stopIDs
	r.stopIDs = nil // the Masker is built without end tokens
	prompt := e.Tokenizer.Encode("<|im_start|>user\nJSON please<|im_end|>\n<|im_start|>assistant\n")
	var text string
	_, err := r.Generate(context.Background(), Generation{Prompt: prompt, MaxTokens: 600, Format: jsonconstrain.ObjectMode(boundedObjects)},
		func(s string) bool { text += s; return true })
	if !errors.Is(err, runtime.ErrConstraintDeadEnd) {
		t.Fatalf("err %v (text %q), want ErrConstraintDeadEnd", err, text)
	}
	var v map[string]any
	if json.Unmarshal([]byte(text), &v) != nil {
		t.Fatalf("the text before the dead end is not the closed document: %q", text)
	}
	r.stopIDs = stops
	if got, _ := collectWith(t, r, Generation{Prompt: prompt, MaxTokens: 8}); got == "" {
		t.Fatal("the engine gave nothing after a dead end")
	}
}
