package openai

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

var cutCallTokens = []string{"<tool_call>", "\n<function=get_weather>\n", "<parameter=city>\nPar", "is\n</parameter>\n", "</function>\n</tool_call>"}

// A reply that max_tokens cuts says finish_reason length, as OpenAI's
// does, even after finished calls, and a call cut halfway is not returned
// or streamed: every call a client sees has whole arguments.
func TestCutToolCallReportsLength(t *testing.T) {
	twoCalls := append(append([]string{}, cutCallTokens...), append([]string{"\n"}, cutCallTokens...)...)
	cases := []struct {
		name      string
		script    []string
		maxTokens int
		finish    string
		calls     int
	}{
		{"cut inside the call", cutCallTokens, 3, "length", 0},
		{"whole call", cutCallTokens, 50, "tool_calls", 1},
		{"cut inside the second call", twoCalls, 8, "length", 1},
		{"cut in text", []string{"It", " is", " sunny"}, 2, "length", 0},
	}
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, &servertest.Engine{Script: script(c.script...)}, hostOptions{}, server.Config{})
			body := `{"model":"m","messages":[{"role":"user","content":"weather?"}],"max_tokens":` + strconv.Itoa(c.maxTokens) + `,` + tools + `}`
			st, _, out := h.post("/v1/chat/completions", "application/json", body)
			if st != 200 {
				t.Fatalf("%d %s", st, out)
			}
			var resp struct {
				Choices []struct {
					Message struct {
						ToolCalls []struct {
							Function struct{ Arguments string } `json:"function"`
						} `json:"tool_calls"`
					} `json:"message"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil {
				t.Fatal(err)
			}
			ch := resp.Choices[0]
			if ch.FinishReason != c.finish || len(ch.Message.ToolCalls) != c.calls {
				t.Fatalf("finish %q, %d calls; want %q, %d: %s", ch.FinishReason, len(ch.Message.ToolCalls), c.finish, c.calls, out)
			}
			for _, call := range ch.Message.ToolCalls {
				if call.Function.Arguments != `{"city":"Paris"}` {
					t.Fatalf("arguments %q", call.Function.Arguments)
				}
			}

			st, _, out = h.post("/v1/chat/completions", "application/json", strings.Replace(body, "{", `{"stream":true,`, 1))
			if st != 200 {
				t.Fatalf("stream: %d %s", st, out)
			}
			data, _ := sseEvents(t, strings.NewReader(out))
			finish, args := "", map[int]string{}
			for _, d := range data {
				var chunk struct {
					Choices []struct {
						Delta struct {
							ToolCalls []struct {
								Index    int
								Function struct{ Arguments string } `json:"function"`
							} `json:"tool_calls"`
						} `json:"delta"`
						FinishReason *string `json:"finish_reason"`
					} `json:"choices"`
				}
				if d == "[DONE]" || json.Unmarshal([]byte(d), &chunk) != nil || len(chunk.Choices) == 0 {
					continue
				}
				for _, tc := range chunk.Choices[0].Delta.ToolCalls {
					args[tc.Index] += tc.Function.Arguments
				}
				if f := chunk.Choices[0].FinishReason; f != nil {
					finish = *f
				}
			}
			if finish != c.finish || len(args) != c.calls {
				t.Fatalf("stream: finish %q, calls %v; want %q, %d", finish, args, c.finish, c.calls)
			}
			for i, a := range args {
				if a != `{"city":"Paris"}` {
					t.Fatalf("stream: call %d arguments %q", i, a)
				}
			}
		})
	}
}
