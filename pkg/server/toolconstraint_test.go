package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/toolconstrain"
)

var planTools = []json.RawMessage{
	json.RawMessage(`{"type":"function","function":{"name":"get","parameters":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}}}`),
	json.RawMessage(`{"type":"function","function":{"name":"put","parameters":{"type":"object","properties":{"when":{"type":"string","format":"date"}}}}}`),
}

// Which requests get a tool-call constraint, and with what choice.
func TestToolPlan(t *testing.T) {
	format, _ := jsonconstrain.Compile(json.RawMessage(`{"type":"object"}`))
	for _, tc := range []struct {
		name     string
		req      ChatRequest
		cfg      Config
		want     bool
		choice   toolconstrain.Choice
		parallel bool
	}{
		{"auto", ChatRequest{Tools: planTools, ToolChoice: ToolAuto, ParallelToolCalls: true}, Config{}, true, toolconstrain.Auto, true},
		{"default choice", ChatRequest{Tools: planTools}, Config{}, true, toolconstrain.Auto, false},
		{"none", ChatRequest{Tools: planTools, ToolChoice: ToolNone}, Config{}, true, toolconstrain.None, false},
		{"required", ChatRequest{Tools: planTools, ToolChoice: ToolRequired}, Config{}, true, toolconstrain.Required, false},
		{"named", ChatRequest{Tools: planTools, ToolChoice: ToolNamed, ToolName: "put"}, Config{}, true, toolconstrain.Named, false},
		{"no tools", ChatRequest{ToolChoice: ToolAuto}, Config{}, false, 0, false},
		{"request turns it off", ChatRequest{Tools: planTools, NoToolConstraint: true}, Config{}, false, 0, false},
		{"server turns it off", ChatRequest{Tools: planTools}, Config{NoToolConstraint: true}, false, 0, false},
		{"a response format rules calls out already", ChatRequest{Tools: planTools, Format: format}, Config{}, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var notes []string
			tc.cfg.Notice = func(s string) { notes = append(notes, s) }
			s := New(tc.cfg)
			p := s.toolPlan(&tc.req)
			if (p != nil) != tc.want {
				t.Fatalf("plan %+v, want one: %v", p, tc.want)
			}
			if p == nil {
				return
			}
			if p.Choice != tc.choice || p.Parallel != tc.parallel || p.Choice == toolconstrain.Named && p.Name != tc.req.ToolName {
				t.Fatalf("plan %+v", p)
			}
		})
	}
}

// A parameter schema the constraint cannot enforce is said once in the
// log, naming the keyword, and the request goes on (not a 400).
func TestToolPlanFallbackNoticedOnce(t *testing.T) {
	var notes []string
	s := New(Config{Notice: func(l string) { notes = append(notes, l) }})
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"once","parameters":{"type":"object","properties":{"re":{"type":"string","pattern":"^(x)\\1$"}}}}}`)}
	for range 3 {
		if s.toolPlan(&ChatRequest{Tools: tools}) == nil {
			t.Fatal("no plan")
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], `once.re: keyword "pattern"`) {
		t.Fatalf("notices %q", notes)
	}
}

// With tool_choice auto the constraint leaves free text alone: greedy and
// sampled replies without a call are those of an unconstrained engine.
func TestRuntimeEngineToolsAutoLeavesTextUnchanged(t *testing.T) {
	e := tinyEngine(t)
	r := NewRuntimeEngine(e, RuntimeOptions{PrefillChunk: 16})
	s := New(Config{})
	plan := s.toolPlan(&ChatRequest{Tools: planTools, ParallelToolCalls: true})
	prompt := e.Tokenizer.Encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
	for _, p := range formatSamplings {
		free, _ := collectWith(t, r, Generation{Prompt: prompt, MaxTokens: 40, Sampling: p})
		got, _ := collectWith(t, r, Generation{Prompt: prompt, MaxTokens: 40, Sampling: p, Tools: plan})
		if strings.Contains(free, "<tool_call>") {
			continue
		}
		if got != free {
			t.Fatalf("sampling %+v: %q with the constraint, %q without", p, got, free)
		}
	}
	if r.format.tools.v == nil {
		t.Fatal("the engine built no tool constraint")
	}
}
