package responses

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// A response that max_output_tokens cuts is incomplete with reason
// max_output_tokens, as OpenAI's is, even after finished function calls,
// and a call cut halfway is not an output item, streamed or not.
func TestCutFunctionCallIsIncomplete(t *testing.T) {
	cases := adaptertest.CutCallCases("incomplete", "completed")
	type response struct {
		Status            string `json:"status"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Output []struct {
			Type      string `json:"type"`
			Arguments string `json:"arguments"`
		} `json:"output"`
	}
	check := func(t *testing.T, what, raw, status string, calls int) {
		t.Helper()
		var r response
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			t.Fatalf("%s: %v: %s", what, err, raw)
		}
		var args []string
		for _, it := range r.Output {
			if it.Type == "function_call" {
				args = append(args, it.Arguments)
			}
		}
		if r.Status != status || len(args) != calls {
			t.Fatalf("%s: status %q, calls %q; want %q, %d: %s", what, r.Status, args, status, calls, raw)
		}
		if (status == "incomplete") != (r.IncompleteDetails != nil && r.IncompleteDetails.Reason == "max_output_tokens") {
			t.Fatalf("%s: incomplete_details %+v with status %s", what, r.IncompleteDetails, r.Status)
		}
		for _, a := range args {
			if a != adaptertest.CutCallArguments {
				t.Fatalf("%s: arguments %q", what, a)
			}
		}
	}
	const tools = `"tools":[{"type":"function","name":"get_weather","parameters":` + adaptertest.WeatherParameters + `}]`
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newHarness(t, &servertest.Engine{Script: script(c.Script...)}, Options{})
			body := `{"input":"weather?","reasoning":{"effort":"none"},"max_output_tokens":` + strconv.Itoa(c.MaxTokens) + `,` + tools + `}`
			st, out := h.post(body)
			if st != 200 {
				t.Fatalf("%d %s", st, out)
			}
			check(t, "non-stream", out, c.Stop, c.Calls)

			st, out = h.post(adaptertest.Streamed(body))
			if st != 200 {
				t.Fatalf("stream: %d %s", st, out)
			}
			events := parseSSE(t, out)
			final := checkInvariants(t, events)
			if want := "response." + c.Stop; events[len(events)-1].Name != want {
				t.Fatalf("stream ends with %s, want %s", events[len(events)-1].Name, want)
			}
			for _, ev := range events {
				if ev.Name == "response.function_call_arguments.delta" && c.Calls == 0 {
					t.Fatalf("stream: a cut call's arguments were streamed: %s", ev.Data)
				}
			}
			check(t, "stream", final, c.Stop, c.Calls)
		})
	}
}
