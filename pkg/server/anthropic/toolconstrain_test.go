package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

func mountMessages(s *server.Server) http.Handler {
	h := httpapi.New(s, httpapi.Options{})
	New(s, Options{}).Mount(h)
	return h
}

// Random weights at temperature 1, 20 seeds (3 under -race or -short),
// tool_choice any or tool: every reply is tool_use blocks that name a
// declared tool and whose input validates against its schema (#40 item 2).
func TestTinyModelForcedToolUseValidates(t *testing.T) {
	re := adaptertest.TinyToolEngine(t)
	choices := []map[string]any{{"type": "any"}, {"type": "tool", "name": "write_file"}, {"type": "tool", "name": "get_weather"}}
	seeds := 20
	if testfix.Quick(raceEnabled) { // each tool_choice once, parallel calls on and off (seeds 0-2); scripts/test.sh runs all 20 without -race
		seeds = 3
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			hs := adaptertest.ToolServer(t, re, uint64(seed)+1, server.Config{}, mountMessages)
			choice := choices[seed%len(choices)]
			choice["disable_parallel_tool_use"] = seed%2 == 1
			body := map[string]any{"model": "tiny", "max_tokens": 1500, "temperature": 1,
				"messages": []map[string]any{{"role": "user", "content": "Call a tool."}}, "tools": adaptertest.AnthropicTools(), "tool_choice": choice}
			var resp struct {
				Content []struct {
					Type  string          `json:"type"`
					Name  string          `json:"name"`
					Input json.RawMessage `json:"input"`
				} `json:"content"`
				StopReason string `json:"stop_reason"`
			}
			adaptertest.PostJSON(t, hs, "/v1/messages", body, &resp)
			var calls []adaptertest.ToolCall
			for _, b := range resp.Content {
				if b.Type == "tool_use" {
					calls = append(calls, adaptertest.ToolCall{Name: b.Name, Arguments: b.Input})
				}
			}
			// max_tokens may cut a later parallel call: the reply says
			// max_tokens and leaves the cut call out, so every call validates.
			adaptertest.CheckForcedCalls(t, "stop_reason", resp.StopReason, [2]string{"tool_use", "max_tokens"}, calls, resp.Content)
		})
	}
}

// nvmai_constrain_tools false turns the constraint off for the request.
func TestConstrainToolsField(t *testing.T) {
	adaptertest.CheckConstrainTools(t, []adaptertest.ConstrainToolsCase{
		{Name: "default", Field: nil, Want: true},
		{Name: "field false", Field: false, Want: false},
	}, mountMessages, "/v1/messages", func() map[string]any {
		return map[string]any{"model": "tiny", "max_tokens": 16, "messages": []map[string]any{{"role": "user", "content": "Hi"}}, "tools": adaptertest.AnthropicTools()}
	})
}
