package server_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

var cutCallTools = []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}`)}

// weatherCallTokens is one whole call, a token a piece.
var weatherCallTokens = []string{"<tool_call>", "\n<function=get_weather>\n", "<parameter=city>\nPar", "is\n</parameter>\n", "<parameter=days>\n3", "\n</parameter>\n", "</function>\n</tool_call>"}

// A reply cut by max_tokens reports length, as OpenAI does (Anthropic's
// max_tokens, Responses' incomplete follow from it), even after finished
// calls; the call being written when the cut came is neither returned nor
// streamed, so no client ever sees arguments that stop mid-value.
func TestCutReplyReportsLengthAndDropsTheUnfinishedCall(t *testing.T) {
	twoCalls := append(append([]string{}, weatherCallTokens...), append([]string{"\n"}, weatherCallTokens...)...)
	cases := []struct {
		name      string
		script    []string
		maxTokens int
		parallel  bool
		finish    string
		calls     int
	}{
		{"cut inside the first call's value", weatherCallTokens, 3, true, "length", 0},
		{"cut between parameters", weatherCallTokens, 4, true, "length", 0},
		{"cut before </tool_call>", weatherCallTokens, 6, true, "length", 0},
		{"one call, then the end", weatherCallTokens, 0, true, "tool_calls", 1},
		{"cut right after the call", append(append([]string{}, weatherCallTokens...), "\n", "<tool_call>"), 7, true, "length", 1},
		{"cut in </function>", append(append([]string{}, weatherCallTokens[:6]...), "</func", "tion>\n</tool_call>"), 7, true, "length", 0},
		{"cut inside the second call", twoCalls, 11, true, "length", 1},
		{"two calls, then the end", twoCalls, 0, true, "tool_calls", 2},
		{"second call refused by parallel_tool_calls false", twoCalls, 0, false, "tool_calls", 1},
		{"cut in text before any call", []string{"Let", " me", " see", "<tool_call>"}, 2, true, "length", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			script := c.script
			s := newCore(t, &servertest.Engine{Script: func(string) []string { return script }})
			no := false
			req := &server.ChatRequest{Messages: userTurn("weather?"), Tools: cutCallTools, ToolChoice: server.ToolAuto,
				ParallelToolCalls: c.parallel, MaxTokens: c.maxTokens, Thinking: &no}
			job, err := s.PrepareChat(req)
			if err != nil {
				t.Fatal(err)
			}
			streamed := map[int]string{}
			starts := 0
			res, err := job.RunChat(context.Background(), func(ev chatparse.Event) {
				switch ev.Kind {
				case chatparse.ToolCallStart:
					starts++
				case chatparse.ToolCallArgs:
					streamed[ev.Index] += ev.Text
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Finish != c.finish || len(res.ToolCalls) != c.calls {
				t.Fatalf("finish %q with %d calls %+v; want %q with %d", res.Finish, len(res.ToolCalls), res.ToolCalls, c.finish, c.calls)
			}
			if starts != c.calls || len(streamed) != c.calls {
				t.Fatalf("streamed %d call starts and arguments %v; want %d calls", starts, streamed, c.calls)
			}
			for i, call := range res.ToolCalls {
				var args struct {
					City string `json:"city"`
					Days int    `json:"days"`
				}
				if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args.City != "Paris" || args.Days != 3 {
					t.Fatalf("call %d arguments %q (%v); want the whole call", i, call.Arguments, err)
				}
				if streamed[i] != call.Arguments {
					t.Fatalf("call %d streamed %q, returned %q", i, streamed[i], call.Arguments)
				}
			}
		})
	}
}
