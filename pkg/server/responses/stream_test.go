package responses

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

var weatherCall = []string{"Let me", " check.", "\n</think>\n\n", "<tool_call>", "\n<function=get_weather>\n", "<parameter=city>\nParis\n</parameter>\n", "</function>\n</tool_call>"}

const weatherTools = `"tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`

// The streamed event sequence for each kind of output is golden; its
// invariants hold; and the final response it carries equals the
// non-stream response to the same request.
func TestStreamEventSequences(t *testing.T) {
	cases := []struct {
		name   string
		script []string
		body   string
	}{
		{"reasoning-then-call", weatherCall, `{"input":"Weather in Paris?",` + weatherTools + `}`},
		{"reasoning-then-text", []string{"Easy.", "\n</think>\n\n", "Paris", " is the capital."}, `{"input":"Capital of France?"}`},
		{"cut-by-max-output-tokens", []string{"The answer", " is", " 42"}, `{"input":"x","reasoning":{"effort":"none"},"max_output_tokens":2}`},
		{"two-calls-one-kept", append(weatherCall[3:], "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>"), `{"input":"x","reasoning":{"effort":"none"},"parallel_tool_calls":false,` + weatherTools + `}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, &servertest.Engine{Script: script(c.script...)}, Options{})
			st, body := h.post(strings.Replace(c.body, "{", `{"stream":true,`, 1))
			if st != 200 {
				t.Fatalf("%d %s", st, body)
			}
			events := parseSSE(t, body)
			final := checkInvariants(t, events)
			var b strings.Builder
			for _, ev := range events {
				b.WriteString("event: " + ev.Name + "\n" + indentJSON(t, ev.Data) + "\n\n")
			}
			golden(t, c.name+".events.txt", normalizeIDs(b.String()))

			st, once := h.post(c.body)
			if st != 200 {
				t.Fatalf("%d %s", st, once)
			}
			var streamed, direct map[string]any
			json.Unmarshal([]byte(normalizeIDs(final)), &streamed)
			json.Unmarshal([]byte(normalizeIDs(once)), &direct)
			a, _ := json.Marshal(streamed)
			d, _ := json.Marshal(direct)
			if string(a) != string(d) {
				t.Fatalf("streamed final response\n%s\ndiffers from the non-stream one\n%s", a, d)
			}
		})
	}
}

// checkInvariants checks what every stream must satisfy and returns the
// final response's JSON.
func checkInvariants(t *testing.T, events []sseEvent) string {
	t.Helper()
	if len(events) < 3 || events[0].Name != "response.created" || events[1].Name != "response.in_progress" {
		t.Fatalf("stream starts %v", events)
	}
	var respID string
	deltas := map[string]string{}
	for i, ev := range events {
		var head struct {
			Type     string `json:"type"`
			Seq      int    `json:"sequence_number"`
			ItemID   string `json:"item_id"`
			Delta    string `json:"delta"`
			Text     string `json:"text"`
			Args     string `json:"arguments"`
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &head); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if head.Type != ev.Name || head.Seq != i {
			t.Fatalf("event %d: type %q under event %q, sequence_number %d", i, head.Type, ev.Name, head.Seq)
		}
		if head.Response.ID != "" {
			if respID == "" {
				respID = head.Response.ID
			}
			if head.Response.ID != respID || !strings.HasPrefix(respID, "resp_") {
				t.Fatalf("response id %q then %q", respID, head.Response.ID)
			}
		}
		switch {
		case strings.HasSuffix(head.Type, ".delta"):
			deltas[head.ItemID] += head.Delta
		case head.Type == "response.output_text.done" || head.Type == "response.reasoning_text.done":
			if deltas[head.ItemID] != head.Text {
				t.Fatalf("%s text %q, deltas %q", head.Type, head.Text, deltas[head.ItemID])
			}
		case head.Type == "response.function_call_arguments.done":
			if deltas[head.ItemID] != head.Args && !(deltas[head.ItemID] == "" && head.Args == "{}") {
				t.Fatalf("arguments %q, deltas %q", head.Args, deltas[head.ItemID])
			}
			if !json.Valid([]byte(head.Args)) {
				t.Fatalf("arguments are not JSON: %q", head.Args)
			}
		}
	}
	last := events[len(events)-1]
	if last.Name != "response.completed" && last.Name != "response.incomplete" {
		t.Fatalf("stream ends with %s", last.Name)
	}
	var end struct {
		Response json.RawMessage `json:"response"`
	}
	json.Unmarshal([]byte(last.Data), &end)
	return string(end.Response)
}

var weatherToolParam = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:        "get_weather",
	Description: oai.String("Weather."),
	Parameters:  map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
}}

// weatherScript calls get_weather until the conversation holds its
// result, then answers with it.
func weatherScript(prompt string) []string {
	if strings.Contains(prompt, "<tool_response>\nsunny") {
		return []string{"Done.", "\n</think>\n\n", "It is ", "sunny."}
	}
	return weatherCall
}

// The official OpenAI Go SDK, as a client: a function-call round trip,
// non-stream and streamed, and a chain by previous_response_id.
func TestSDKFunctionCallRoundTrip(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: weatherScript}, Options{})
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model: "fake-model",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Weather in Paris?")},
		Tools: []responses.ToolUnionParam{weatherToolParam},
	}
	for _, streamed := range []bool{false, true} {
		var r *responses.Response
		if streamed {
			r = streamResponse(t, h, params)
		} else {
			var err error
			if r, err = h.client.Responses.New(ctx, params); err != nil {
				t.Fatal(err)
			}
		}
		if r.Status != "completed" || len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[1].Type != "function_call" {
			t.Fatalf("streamed %v: %s", streamed, r.RawJSON())
		}
		if got := r.Output[0].AsReasoning(); len(got.Content) != 1 || strings.TrimSpace(got.Content[0].Text) != "Let me check." {
			t.Fatalf("reasoning %+v", got)
		}
		call := r.Output[1].AsFunctionCall()
		if call.Name != "get_weather" || call.Arguments != `{"city": "Paris"}` && call.Arguments != `{"city":"Paris"}` || !strings.HasPrefix(call.ID, "fc_") || !strings.HasPrefix(call.CallID, "call_") {
			t.Fatalf("call %+v", call)
		}
		if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || r.Usage.OutputTokensDetails.ReasoningTokens != 3 {
			t.Fatalf("usage %+v", r.Usage)
		}
		// Round two: the client sends the call and its output back.
		out := responses.ResponseInputItemParamOfFunctionCallOutput("sunny")
		out.OfFunctionCallOutput.CallID = oai.String(call.CallID)
		next := params
		next.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
			out,
		}}
		var final *responses.Response
		if streamed {
			final = streamResponse(t, h, next)
		} else {
			var err error
			if final, err = h.client.Responses.New(ctx, next); err != nil {
				t.Fatal(err)
			}
		}
		if msg := final.Output[len(final.Output)-1].AsMessage(); len(msg.Content) != 1 || msg.Content[0].Text != "It is sunny." || !strings.HasPrefix(msg.ID, "msg_") {
			t.Fatalf("final %s", final.RawJSON())
		}
		if p := h.lastPrompt(); !strings.Contains(p, "<parameter=city>\nParis\n</parameter>") {
			t.Fatalf("round two prompt lacks the call:\n%s", p)
		}
		// The same through previous_response_id: only the output is sent.
		chained := params
		chained.PreviousResponseID = oai.String(r.ID)
		chained.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}
		if c, err := h.client.Responses.New(ctx, chained); err != nil || c.Output[len(c.Output)-1].AsMessage().Content[0].Text != "It is sunny." {
			t.Fatalf("chained: %v %v", err, c)
		}
	}
}

func streamResponse(t *testing.T, h *harness, p responses.ResponseNewParams) *responses.Response {
	t.Helper()
	s := h.client.Responses.NewStreaming(context.Background(), p)
	defer s.Close()
	var last *responses.Response
	n := 0
	for s.Next() {
		ev := s.Current()
		if ev.SequenceNumber != int64(n) {
			t.Fatalf("event %d has sequence_number %d", n, ev.SequenceNumber)
		}
		n++
		if ev.Type == "response.completed" {
			r := ev.AsResponseCompleted().Response
			last = &r
		}
	}
	if s.Err() != nil || last == nil {
		t.Fatalf("stream: %v (completed %v)", s.Err(), last != nil)
	}
	return last
}

// failingEngine emits one token, then fails as a broken engine would.
type failingEngine struct{ servertest.Engine }

func (e *failingEngine) Generate(ctx context.Context, g server.Generation, onToken func(string) bool) (server.Outcome, error) {
	onToken("partial")
	return server.Outcome{}, errors.New("the expert file went away")
}

// A failure after the stream started ends it with an error event and
// response.failed carrying what was generated.
func TestStreamFailureEndsWithResponseFailed(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := server.New(server.Config{Log: func(server.RequestLog) {}, Now: func() time.Time { return now }})
	s.SetEngine(&failingEngine{}, qwen36(t))
	oh := httpapi.New(s, httpapi.Options{})
	New(s, Options{Log: io.Discard}).Mount(oh)
	hs := httptest.NewServer(oh)
	defer hs.Close()
	resp, err := hs.Client().Post(hs.URL+Path, "application/json", strings.NewReader(`{"stream":true,"input":"x","reasoning":{"effort":"none"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	events := parseSSE(t, string(b))
	n := len(events)
	if n < 3 || events[n-2].Name != "error" || events[n-1].Name != "response.failed" {
		t.Fatalf("stream:\n%s", b)
	}
	var failed struct {
		Response struct {
			Status string
			Error  struct{ Code, Message string }
			Output []struct{ Content []struct{ Text string } }
		}
	}
	json.Unmarshal([]byte(events[n-1].Data), &failed)
	r := failed.Response
	if r.Status != "failed" || r.Error.Code != "server_error" || !strings.Contains(r.Error.Message, "the expert file went away") || len(r.Output) != 1 || r.Output[0].Content[0].Text != "partial" {
		t.Fatalf("response.failed: %s", events[n-1].Data)
	}
}

// A client that goes away mid-stream cancels the generation: the engine
// is free for the next request and no goroutine is left behind.
func TestDisconnectCancelsAndLeaksNothing(t *testing.T) {
	eng := &servertest.Engine{TokenDelay: 20 * time.Millisecond, Script: func(string) []string { return strings.Split(strings.Repeat("x", 500), "") }}
	h := newHarness(t, eng, Options{KeepAlive: 10 * time.Millisecond})
	h.post(`{"input":"warm up","max_output_tokens":1}`)
	base := runtime.NumGoroutine()
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http.URL+Path, strings.NewReader(`{"stream":true,"input":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		resp.Body.Read(buf) // response.created has arrived
		cancel()
		resp.Body.Close()
	}
	start := time.Now()
	if st, body := h.post(`{"input":"after","max_output_tokens":2}`); st != 200 {
		t.Fatalf("the engine is not free: %d %s", st, body)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the cancelled generations ran on")
	}
	h.http.CloseClientConnections()
	adaptertest.WaitGoroutines(t, base, 5*time.Second)
}

// Long prefills keep the stream alive with SSE comments.
func TestKeepAliveDuringPrefill(t *testing.T) {
	eng := &servertest.Engine{PrefillDelay: 200 * time.Millisecond}
	h := newHarness(t, eng, Options{KeepAlive: 20 * time.Millisecond})
	_, body := h.post(`{"stream":true,"input":"x"}`)
	if !strings.Contains(body, ": keep-alive\n\n") {
		t.Fatalf("no keep-alive in %s", body)
	}
	checkInvariants(t, parseSSE(t, body))
}

// What Codex needs of the stream, beyond what the SDK checks: a message's
// output_item.added carries content [] (without it Codex drops every text
// delta of the message: "OutputTextDelta without active item"), and a
// reasoning item always carries summary [].
func TestStreamItemShapesCodexNeeds(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: script("Think.", "\n</think>\n\n", "Hi.")}, Options{})
	_, body := h.post(`{"stream":true,"input":"x"}`)
	var added []map[string]any
	for _, ev := range parseSSE(t, body) {
		if ev.Name == "response.output_item.added" {
			var e struct{ Item map[string]any }
			json.Unmarshal([]byte(ev.Data), &e)
			added = append(added, e.Item)
		}
	}
	if len(added) != 2 {
		t.Fatalf("items added: %v", added)
	}
	if s, ok := added[0]["summary"].([]any); !ok || len(s) != 0 || added[0]["type"] != "reasoning" {
		t.Fatalf("reasoning item %v", added[0])
	}
	if c, ok := added[1]["content"].([]any); !ok || len(c) != 0 || added[1]["type"] != "message" || added[1]["role"] != "assistant" {
		t.Fatalf("message item %v", added[1])
	}
}
