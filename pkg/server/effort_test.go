package server_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func testTemplate(t *testing.T, model string) *chattemplate.Template {
	t.Helper()
	tmpl, err := chattemplate.Load(filepath.Join("..", "chattemplate", "testdata", "models", model))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

const (
	sentenceXHigh = "Reasoning effort is set to xhigh."
	sentenceLow   = "Reasoning effort is set to low."
)

// The core maps a protocol's reasoning level onto what a Qwen3.8 template
// accepts, checks chat_template_kwargs.reasoning_effort against it, and
// leaves a Qwen3.6 template exactly as it renders without the level.
func TestReasoningEffortReachesTheTemplate(t *testing.T) {
	off, on := false, true
	sys := []chattemplate.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	cases := []struct {
		name      string
		req       server.ChatRequest
		want      []string // substrings of the qwen38 prompt
		notWant   []string
		wantParam string // the 400's field
	}{
		{"default is xhigh", server.ChatRequest{}, []string{"system\n" + sentenceXHigh + " Please think carefully and thoroughly before you answer.\n\nBe brief.<|im_end|>"}, nil, ""},
		{"low", server.ChatRequest{ReasoningEffort: "low"}, []string{"system\n" + sentenceLow}, []string{sentenceXHigh}, ""},
		{"medium adds nothing", server.ChatRequest{ReasoningEffort: "medium"}, []string{"<|im_start|>system\nBe brief.<|im_end|>"}, []string{"Reasoning effort"}, ""},
		{"high maps to xhigh", server.ChatRequest{ReasoningEffort: "high"}, []string{sentenceXHigh}, nil, ""},
		{"max maps to xhigh", server.ChatRequest{ReasoningEffort: "max"}, []string{sentenceXHigh}, nil, ""},
		{"thinking off: no sentence", server.ChatRequest{ReasoningEffort: "low", Thinking: &off}, []string{"<think>\n\n</think>\n\n"}, []string{"Reasoning effort"}, ""},
		{"thinking on", server.ChatRequest{ReasoningEffort: "low", Thinking: &on}, []string{sentenceLow}, nil, ""},
		{"kwargs win over the level", server.ChatRequest{ReasoningEffort: "low", Kwargs: map[string]any{"reasoning_effort": "medium"}}, nil, []string{"Reasoning effort"}, ""},
		{"kwargs low", server.ChatRequest{Kwargs: map[string]any{"reasoning_effort": "low"}}, []string{sentenceLow}, nil, ""},
		{"kwargs invalid", server.ChatRequest{Kwargs: map[string]any{"reasoning_effort": "high"}}, nil, nil, "chat_template_kwargs.reasoning_effort"},
		{"kwargs not a string", server.ChatRequest{Kwargs: map[string]any{"reasoning_effort": 2.0}}, nil, nil, "chat_template_kwargs.reasoning_effort"},
		{"kwargs invalid, thinking off: ignored as the template does", server.ChatRequest{Kwargs: map[string]any{"reasoning_effort": "bogus", "enable_thinking": false}}, []string{"<think>\n\n</think>"}, nil, ""},
		{"unknown level", server.ChatRequest{ReasoningEffort: "extreme", EffortParam: "reasoning.effort"}, nil, nil, "reasoning.effort"},
	}
	q38 := newTemplateCore(t, testTemplate(t, "qwen38"))
	q36 := newTemplateCore(t, testTemplate(t, "qwen36"))
	plain, err := q36.ApplyTemplate(&server.ChatRequest{Messages: sys})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			req.Messages = sys
			got, err := q38.ApplyTemplate(&req)
			if c.wantParam != "" {
				var se *server.Error
				if !errors.As(err, &se) || se.Kind != server.KindInvalid || se.Param != c.wantParam {
					t.Fatalf("err = %#v, want a 400 naming %s", err, c.wantParam)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("prompt %q lacks %q", got, w)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(got, w) {
					t.Errorf("prompt %q holds %q", got, w)
				}
			}
			// Qwen3.6 never sees the level: a request without kwargs
			// renders as it does without ReasoningEffort.
			if req.Kwargs == nil && req.Thinking == nil {
				req36 := c.req
				req36.Messages = sys
				got36, err := q36.ApplyTemplate(&req36)
				if err != nil && c.wantParam == "" {
					t.Fatal(err)
				}
				if got36 != plain {
					t.Errorf("qwen36 renders %q with the level, %q without", got36, plain)
				}
			}
		})
	}
}

// With a Qwen3.8 template every earlier assistant turn's reasoning is
// rendered back; with Qwen3.6 only the turns after the last user query.
func TestEarlierReasoningRenderedBackForQwen38(t *testing.T) {
	r := "earlier reasoning"
	msgs := []chattemplate.Message{{Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1", ReasoningContent: &r}, {Role: "user", Content: "Q2"}}
	for _, c := range []struct {
		model  string
		kwargs map[string]any
		want   bool
	}{
		{"qwen38", nil, true},
		{"qwen38", map[string]any{"preserve_thinking": false}, false},
		{"qwen36", nil, false},
		{"qwen36", map[string]any{"preserve_thinking": true}, true},
	} {
		got, err := newTemplateCore(t, testTemplate(t, c.model)).ApplyTemplate(&server.ChatRequest{Messages: msgs, Kwargs: c.kwargs})
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(got, "<think>\n"+r+"\n</think>\n\nA1"); has != c.want {
			t.Errorf("%s %v: reasoning rendered back %v, want %v:\n%s", c.model, c.kwargs, has, c.want, got)
		}
	}
}

func newTemplateCore(t *testing.T, r server.Renderer) *server.Server {
	t.Helper()
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, r)
	return s
}
