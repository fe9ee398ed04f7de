package responses

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func TestMain(m *testing.M) { fixinstall.Main(m) }

func mountResponses(s *server.Server) http.Handler {
	h := httpapi.New(s, httpapi.Options{})
	New(s, Options{}).Mount(h)
	return h
}

func responsesTools() []map[string]any {
	var out []map[string]any
	for _, t := range adaptertest.ToolCorpus {
		out = append(out, map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": json.RawMessage(t.Parameters)})
	}
	return out
}

// Random weights at temperature 1, 20 seeds, tool_choice required or
// named: every reply is function_call items that name a declared tool and
// whose arguments validate against its schema (#40 item 2).
func TestTinyModelForcedFunctionCallsValidate(t *testing.T) {
	re := server.NewRuntimeEngine(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
	choices := []any{"required", map[string]any{"type": "function", "name": "search"}, map[string]any{"type": "function", "name": "get_weather"}}
	for seed := range 20 {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			hs := adaptertest.ToolServer(t, re, uint64(seed)+1, server.Config{}, mountResponses)
			body := map[string]any{"model": "tiny", "input": "Call a tool.", "tools": responsesTools(), "store": false,
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
			var calls []int
			for i, it := range resp.Output {
				if it.Type == "function_call" {
					calls = append(calls, i)
				}
			}
			// max_output_tokens may cut a later parallel call: the response
			// is incomplete and leaves the cut call out, so every call validates.
			if (resp.Status != "completed" && resp.Status != "incomplete") || len(calls) == 0 {
				t.Fatalf("status %s, output %+v", resp.Status, resp.Output)
			}
			for _, i := range calls {
				if err := adaptertest.CheckToolCall(resp.Output[i].Name, json.RawMessage(resp.Output[i].Arguments)); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// nvmai_constrain_tools false turns the constraint off for the request.
func TestConstrainToolsField(t *testing.T) {
	for _, field := range []any{nil, false} {
		e := &servertest.Engine{}
		s := server.New(server.Config{Log: func(server.RequestLog) {}})
		s.SetEngine(e, servertest.Renderer{})
		hs := adaptertest.ToolServerOver(t, s, mountResponses)
		body := map[string]any{"model": "tiny", "input": "Hi", "tools": responsesTools(), "store": false}
		if field != nil {
			body["nvmai_constrain_tools"] = field
		}
		var resp map[string]any
		adaptertest.PostJSON(t, hs, Path, body, &resp)
		if got := e.Generations()[0].Tools != nil; got != (field == nil) {
			t.Fatalf("nvmai_constrain_tools %v: constrained %v", field, got)
		}
	}
}
