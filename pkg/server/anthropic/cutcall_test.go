package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// A reply that max_tokens cuts says stop_reason max_tokens, as Anthropic's
// does, even after finished tool_use blocks, and a call cut halfway is not
// a tool_use block, streamed or not: every input a client sees is whole.
func TestCutToolUseReportsMaxTokens(t *testing.T) {
	cases := adaptertest.CutCallCases("max_tokens", "tool_use")
	const tools = `"tools":[{"name":"get_weather","input_schema":` + adaptertest.WeatherParameters + `}]`
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newHarness(t, &servertest.Engine{Script: script(c.Script...)}, harnessOptions{})
			body := `{"model":"m","messages":[{"role":"user","content":"weather?"}],"max_tokens":` + strconv.Itoa(c.MaxTokens) + `,` + tools + `}`
			st, _, out := h.post("/v1/messages", body)
			if st != 200 {
				t.Fatalf("%d %s", st, out)
			}
			var resp struct {
				Content []struct {
					Type  string          `json:"type"`
					Input json.RawMessage `json:"input"`
				} `json:"content"`
				StopReason string `json:"stop_reason"`
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil {
				t.Fatal(err)
			}
			var inputs []string
			for _, b := range resp.Content {
				if b.Type == "tool_use" {
					inputs = append(inputs, string(b.Input))
				}
			}
			if resp.StopReason != c.Stop || len(inputs) != c.Calls {
				t.Fatalf("stop_reason %q, tool_use %q; want %q, %d: %s", resp.StopReason, inputs, c.Stop, c.Calls, out)
			}
			for _, in := range inputs {
				if in != adaptertest.CutCallArguments {
					t.Fatalf("input %s", in)
				}
			}

			st, _, out = h.post("/v1/messages", adaptertest.Streamed(body))
			if st != 200 {
				t.Fatalf("stream: %d %s", st, out)
			}
			stop, partial := "", map[float64]string{}
			for _, ev := range readEvents(t, strings.NewReader(out)) {
				switch ev.name {
				case "content_block_start":
					if b, _ := ev.data["content_block"].(map[string]any); b["type"] == "tool_use" {
						partial[ev.data["index"].(float64)] += ""
					}
				case "content_block_delta":
					if d, _ := ev.data["delta"].(map[string]any); d["type"] == "input_json_delta" {
						partial[ev.data["index"].(float64)] += d["partial_json"].(string)
					}
				case "message_delta":
					stop, _ = ev.data["delta"].(map[string]any)["stop_reason"].(string)
				}
			}
			if stop != c.Stop || len(partial) != c.Calls {
				t.Fatalf("stream: stop_reason %q, tool_use %v; want %q, %d", stop, partial, c.Stop, c.Calls)
			}
			for _, in := range partial {
				if in != adaptertest.CutCallArguments {
					t.Fatalf("stream: input %q", in)
				}
			}
		})
	}
}
