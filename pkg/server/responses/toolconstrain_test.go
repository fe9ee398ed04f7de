package responses

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

func mountResponses(s *server.Server) http.Handler {
	h := httpapi.New(s, httpapi.Options{})
	New(s, Options{}).Mount(h)
	return h
}

// Random weights at temperature 1, 20 seeds (3 under -race or -short),
// tool_choice required or named: every reply is function_call items that
// name a declared tool and whose arguments validate against its schema
// (#40 item 2).
func TestTinyModelForcedFunctionCallsValidate(t *testing.T) {
	re := adaptertest.TinyToolEngine(t)
	choices := []any{"required", map[string]any{"type": "function", "name": "search"}, map[string]any{"type": "function", "name": "get_weather"}}
	seeds := 20
	if testfix.Quick(raceEnabled) { // each tool_choice once, parallel calls on and off (seeds 0-2); scripts/test.sh runs all 20 without -race
		seeds = 3
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			hs := adaptertest.ToolServer(t, re, uint64(seed)+1, server.Config{}, mountResponses)
			body := map[string]any{"model": "tiny", "input": "Call a tool.", "tools": adaptertest.ResponsesTools(), "store": false,
				"tool_choice": choices[seed%len(choices)], "parallel_tool_calls": seed%2 == 0, "temperature": 1, "max_output_tokens": 1500}
			var resp struct {
				Status string `json:"status"`
				Usage  struct {
					OutputTokens int `json:"output_tokens"`
				} `json:"usage"`
				Output []struct {
					Type      string `json:"type"`
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"output"`
			}
			adaptertest.PostJSON(t, hs, Path, body, &resp)
			var calls []adaptertest.ToolCall
			for _, it := range resp.Output {
				if it.Type == "function_call" {
					calls = append(calls, adaptertest.ToolCall{Name: it.Name, Arguments: json.RawMessage(it.Arguments)})
				}
			}
			// max_output_tokens may cut a later parallel call: the response
			// is incomplete and leaves the cut call out, so every call validates.
			adaptertest.CheckForcedCalls(t, "status", resp.Status, [2]string{"completed", "incomplete"}, calls, resp.Output)
		})
	}
}

// nvmai_constrain_tools false turns the constraint off for the request.
func TestConstrainToolsField(t *testing.T) {
	adaptertest.CheckConstrainTools(t, []adaptertest.ConstrainToolsCase{
		{Name: "default", Field: nil, Want: true},
		{Name: "field false", Field: false, Want: false},
	}, mountResponses, Path, func() map[string]any {
		return map[string]any{"model": "tiny", "input": "Hi", "tools": adaptertest.ResponsesTools(), "store": false}
	})
}
