package openai

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// A reply that max_tokens cuts says finish_reason length, as OpenAI's
// does, even after finished calls, and a call cut halfway is not returned
// or streamed: every call a client sees has whole arguments.
func TestCutToolCallReportsLength(t *testing.T) {
	cases := adaptertest.CutCallCases("length", "tool_calls")
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":` + adaptertest.WeatherParameters + `}}]`
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newHarness(t, &servertest.Engine{Script: script(c.Script...)}, hostOptions{}, server.Config{})
			body := `{"model":"m","messages":[{"role":"user","content":"weather?"}],"max_tokens":` + strconv.Itoa(c.MaxTokens) + `,` + tools + `}`
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
			if ch.FinishReason != c.Stop || len(ch.Message.ToolCalls) != c.Calls {
				t.Fatalf("finish %q, %d calls; want %q, %d: %s", ch.FinishReason, len(ch.Message.ToolCalls), c.Stop, c.Calls, out)
			}
			for _, call := range ch.Message.ToolCalls {
				if call.Function.Arguments != adaptertest.CutCallArguments {
					t.Fatalf("arguments %q", call.Function.Arguments)
				}
			}

			st, _, out = h.post("/v1/chat/completions", "application/json", adaptertest.Streamed(body))
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
			if finish != c.Stop || len(args) != c.Calls {
				t.Fatalf("stream: finish %q, calls %v; want %q, %d", finish, args, c.Stop, c.Calls)
			}
			for i, a := range args {
				if a != adaptertest.CutCallArguments {
					t.Fatalf("stream: call %d arguments %q", i, a)
				}
			}
		})
	}
}
