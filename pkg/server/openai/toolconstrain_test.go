package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// Random weights at temperature 1, 20 seeds, tool_choice required or
// named: every reply is tool calls that name a declared tool and whose
// arguments validate against its schema (#40 item 2).
func TestTinyModelForcedToolCallsValidate(t *testing.T) {
	re := server.NewRuntimeEngine(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
	hs := adaptertest.ToolServer(t, re, 1, server.Config{}, func(s *server.Server) http.Handler { return host(s) })
	choices := []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "write_file"}},
		map[string]any{"type": "function", "function": map[string]any{"name": "search"}}}
	for seed := range 20 {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			body := map[string]any{"model": "tiny", "messages": []map[string]any{{"role": "user", "content": "Call a tool."}},
				"tools": adaptertest.OpenAITools(), "tool_choice": choices[seed%len(choices)], "parallel_tool_calls": seed%2 == 0,
				"temperature": 1, "seed": seed, "max_tokens": 1500}
			var resp struct {
				Choices []struct {
					Message struct {
						Content   *string `json:"content"`
						ToolCalls []struct {
							Function struct{ Name, Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			adaptertest.PostJSON(t, hs, "/v1/chat/completions", body, &resp)
			c := resp.Choices[0]
			// max_tokens may cut a later parallel call: the reply says length
			// and leaves the cut call out, so every call returned validates.
			if (c.FinishReason != "tool_calls" && c.FinishReason != "length") || len(c.Message.ToolCalls) == 0 {
				t.Fatalf("finish %s, %d calls, content %v", c.FinishReason, len(c.Message.ToolCalls), c.Message.Content)
			}
			for _, call := range c.Message.ToolCalls {
				if err := adaptertest.CheckToolCall(call.Function.Name, json.RawMessage(call.Function.Arguments)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The constraint is on by default for a request with tools, and
// nvmai_constrain_tools false (or serve --no-constrain-tools) turns it off.
func TestConstrainToolsField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		field  any
		server bool // serve --no-constrain-tools
		want   bool
	}{
		{"default", nil, false, true},
		{"field true", true, false, true},
		{"field false", false, false, false},
		{"server flag", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &servertest.Engine{}
			s := server.New(server.Config{Log: func(server.RequestLog) {}, NoToolConstraint: tc.server})
			s.SetEngine(e, servertest.Renderer{})
			hs := adaptertest.ToolServerOver(t, s, func(s *server.Server) http.Handler { return host(s) })
			body := map[string]any{"model": "tiny", "messages": []map[string]any{{"role": "user", "content": "Hi"}}, "tools": adaptertest.OpenAITools()}
			if tc.field != nil {
				body["nvmai_constrain_tools"] = tc.field
			}
			var resp map[string]any
			adaptertest.PostJSON(t, hs, "/v1/chat/completions", body, &resp)
			if got := e.Generations()[0].Tools != nil; got != tc.want {
				t.Fatalf("constrained %v, want %v", got, tc.want)
			}
		})
	}
}
