package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

// Random weights at temperature 1, 20 seeds (3 under -race or -short),
// tool_choice required or named: every reply is tool calls that name a
// declared tool and whose arguments validate against its schema (#40 item
// 2).
func TestTinyModelForcedToolCallsValidate(t *testing.T) {
	re := adaptertest.TinyToolEngine(t)
	hs := adaptertest.ToolServer(t, re, 1, server.Config{}, func(s *server.Server) http.Handler { return host(s) })
	choices := []any{"required", map[string]any{"type": "function", "function": map[string]any{"name": "write_file"}},
		map[string]any{"type": "function", "function": map[string]any{"name": "search"}}}
	seeds := 20
	if testfix.Quick(raceEnabled) { // each tool_choice once, parallel calls on and off (seeds 0-2); scripts/test.sh runs all 20 without -race
		seeds = 3
	}
	for seed := range seeds {
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
			var calls []adaptertest.ToolCall
			for _, call := range c.Message.ToolCalls {
				calls = append(calls, adaptertest.ToolCall{Name: call.Function.Name, Arguments: json.RawMessage(call.Function.Arguments)})
			}
			// max_tokens may cut a later parallel call: the reply says length
			// and leaves the cut call out, so every call returned validates.
			adaptertest.CheckForcedCalls(t, "finish", c.FinishReason, [2]string{"tool_calls", "length"}, calls, c.Message)
		})
	}
}

// The constraint is on by default for a request with tools, and
// nvmai_constrain_tools false (or serve --no-constrain-tools) turns it off.
func TestConstrainToolsField(t *testing.T) {
	adaptertest.CheckConstrainTools(t, []adaptertest.ConstrainToolsCase{
		{Name: "default", Field: nil, NoConstraint: false, Want: true},
		{Name: "field true", Field: true, NoConstraint: false, Want: true},
		{Name: "field false", Field: false, NoConstraint: false, Want: false},
		{Name: "server flag", Field: nil, NoConstraint: true, Want: false},
	}, func(s *server.Server) http.Handler { return host(s) }, "/v1/chat/completions", func() map[string]any {
		return map[string]any{"model": "tiny", "messages": []map[string]any{{"role": "user", "content": "Hi"}}, "tools": adaptertest.OpenAITools()}
	})
}
