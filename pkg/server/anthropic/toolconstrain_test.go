package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func mountMessages(s *server.Server) http.Handler {
	h := httpapi.New(s, httpapi.Options{})
	New(s, Options{}).Mount(h)
	return h
}

func anthropicTools() []map[string]any {
	var out []map[string]any
	for _, t := range adaptertest.ToolCorpus {
		out = append(out, map[string]any{"name": t.Name, "description": t.Description, "input_schema": json.RawMessage(t.Parameters)})
	}
	return out
}

// Random weights at temperature 1, 20 seeds, tool_choice any or tool: every
// reply is tool_use blocks that name a declared tool and whose input
// validates against its schema (#40 item 2).
func TestTinyModelForcedToolUseValidates(t *testing.T) {
	re := server.NewRuntimeEngine(adaptertest.TinyEngine(t), server.RuntimeOptions{ModelID: "tiny", PrefillChunk: 16})
	choices := []map[string]any{{"type": "any"}, {"type": "tool", "name": "write_file"}, {"type": "tool", "name": "get_weather"}}
	for seed := range 20 {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			hs := adaptertest.ToolServer(t, re, uint64(seed)+1, server.Config{}, mountMessages)
			choice := choices[seed%len(choices)]
			choice["disable_parallel_tool_use"] = seed%2 == 1
			body := map[string]any{"model": "tiny", "max_tokens": 1500, "temperature": 1,
				"messages": []map[string]any{{"role": "user", "content": "Call a tool."}}, "tools": anthropicTools(), "tool_choice": choice}
			var resp struct {
				Content []struct {
					Type  string          `json:"type"`
					Name  string          `json:"name"`
					Input json.RawMessage `json:"input"`
				} `json:"content"`
				StopReason string `json:"stop_reason"`
			}
			adaptertest.PostJSON(t, hs, "/v1/messages", body, &resp)
			var calls []int
			for i, b := range resp.Content {
				if b.Type == "tool_use" {
					calls = append(calls, i)
				}
			}
			// max_tokens may cut a later parallel call: the reply says
			// max_tokens and leaves the cut call out, so every call validates.
			if (resp.StopReason != "tool_use" && resp.StopReason != "max_tokens") || len(calls) == 0 {
				t.Fatalf("stop_reason %s, content %+v", resp.StopReason, resp.Content)
			}
			for _, i := range calls {
				if err := adaptertest.CheckToolCall(resp.Content[i].Name, resp.Content[i].Input); err != nil {
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
		hs := adaptertest.ToolServerOver(t, s, mountMessages)
		body := map[string]any{"model": "tiny", "max_tokens": 16, "messages": []map[string]any{{"role": "user", "content": "Hi"}}, "tools": anthropicTools()}
		if field != nil {
			body["nvmai_constrain_tools"] = field
		}
		var resp map[string]any
		adaptertest.PostJSON(t, hs, "/v1/messages", body, &resp)
		if got := e.Generations()[0].Tools != nil; got != (field == nil) {
			t.Fatalf("nvmai_constrain_tools %v: constrained %v", field, got)
		}
	}
}
