package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

type harness struct {
	t    *testing.T
	eng  server.Engine
	srv  *server.Server
	http *httptest.Server
	logs *bytes.Buffer
	key  string
}

type harnessOptions struct {
	thinking   bool
	apiKey     string
	keepAlive  time.Duration
	queueLimit int
	renderer   server.Renderer
	noEngine   bool
	maxBody    int64
}

func newHarness(t *testing.T, eng server.Engine, o harnessOptions) *harness {
	t.Helper()
	logs := &bytes.Buffer{}
	think := o.thinking
	s := server.New(server.Config{Thinking: &think, Log: server.TextLogger(logs), QueueLimit: o.queueLimit})
	if o.renderer == nil {
		o.renderer = servertest.Renderer{}
	}
	if !o.noEngine {
		s.SetEngine(eng, o.renderer)
	}
	h := httpapi.New(s, httpapi.Options{APIKey: o.apiKey, MaxBody: o.maxBody})
	New(s, Options{KeepAlive: o.keepAlive}).Mount(h)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &harness{t: t, eng: eng, srv: s, http: hs, logs: logs, key: o.apiKey}
}

// post sends a body to path and returns status, headers and body.
func (h *harness) post(path, body string, header ...string) (int, http.Header, string) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.http.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func script(pieces ...string) func(string) []string { return func(string) []string { return pieces } }

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

func readEvents(t *testing.T, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var name string
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			if d["type"] != name {
				t.Fatalf("event %q carries data of type %v", name, d["type"])
			}
			out = append(out, sseEvent{name: name, data: d})
		}
	}
	return out
}

// shape writes an event sequence compactly, one run of equal deltas as
// one entry: "content_block_delta 0 text_delta" etc.
func shape(events []sseEvent) []string {
	var out []string
	for _, e := range events {
		s := e.name
		switch e.name {
		case "content_block_start":
			s += fmt.Sprintf(" %v %v", e.data["index"], e.data["content_block"].(map[string]any)["type"])
		case "content_block_delta":
			s += fmt.Sprintf(" %v %v", e.data["index"], e.data["delta"].(map[string]any)["type"])
		case "content_block_stop":
			s += fmt.Sprintf(" %v", e.data["index"])
		case "message_delta":
			d := e.data["delta"].(map[string]any)
			s += fmt.Sprintf(" %v", d["stop_reason"])
			if d["stop_sequence"] != nil {
				s += fmt.Sprintf(" %q", d["stop_sequence"])
			}
		}
		if len(out) > 0 && out[len(out)-1] == s {
			continue
		}
		out = append(out, s)
	}
	return out
}

var toolCall = []string{"<tool_call>\n", "<function=get_weather>\n", "<parameter=city>\n", "Paris\n", "</parameter>\n", "</function>\n", "</tool_call>"}

func TestStreamEventGrammar(t *testing.T) {
	withTool := `"tools":[` + weatherTool + `],`
	cases := []struct {
		name     string
		thinking bool
		extra    string
		script   []string
		want     []string
	}{
		{"text", false, "", []string{"Hel", "lo", "!"}, []string{
			"content_block_start 0 text", "content_block_delta 0 text_delta", "content_block_stop 0",
			"message_delta end_turn"}},
		{"thinking then text", true, "", []string{"Let me ", "think.", "</think>\n\n", "Hi ", "there."}, []string{
			"content_block_start 0 thinking", "content_block_delta 0 thinking_delta", "content_block_delta 0 signature_delta", "content_block_stop 0",
			"content_block_start 1 text", "content_block_delta 1 text_delta", "content_block_stop 1",
			"message_delta end_turn"}},
		{"thinking then tool use", true, withTool, append([]string{"Check.", "</think>\n\n"}, toolCall...), []string{
			"content_block_start 0 thinking", "content_block_delta 0 thinking_delta", "content_block_delta 0 signature_delta", "content_block_stop 0",
			"content_block_start 1 tool_use", "content_block_delta 1 input_json_delta", "content_block_stop 1",
			"message_delta tool_use"}},
		{"text then two calls", false, withTool, append(append([]string{"Looking.\n\n"}, toolCall...), append([]string{"\n"}, toolCall...)...), []string{
			"content_block_start 0 text", "content_block_delta 0 text_delta", "content_block_stop 0",
			"content_block_start 1 tool_use", "content_block_delta 1 input_json_delta", "content_block_stop 1",
			"content_block_start 2 tool_use", "content_block_delta 2 input_json_delta", "content_block_stop 2",
			"message_delta tool_use"}},
		{"disable_parallel_tool_use keeps one call", false, withTool + `"tool_choice":{"type":"auto","disable_parallel_tool_use":true},`, append(append([]string{}, toolCall...), append([]string{"\n"}, toolCall...)...), []string{
			"content_block_start 0 tool_use", "content_block_delta 0 input_json_delta", "content_block_stop 0",
			"message_delta tool_use"}},
		{"max_tokens", false, "", []string{"a", "b", "c", "d"}, []string{
			"content_block_start 0 text", "content_block_delta 0 text_delta", "content_block_stop 0",
			"message_delta max_tokens"}},
		{"stop sequence", false, `"stop_sequences":["STOP"],`, []string{"one ", "ST", "OP", " two"}, []string{
			"content_block_start 0 text", "content_block_delta 0 text_delta", "content_block_stop 0",
			`message_delta stop_sequence "STOP"`}},
		{"empty reply", false, "", []string{}, []string{"message_delta end_turn"}},
		{"unclosed thinking is all thinking", true, "", []string{"hmm ", "hmm ", "hmm", "hmm"}, []string{
			"content_block_start 0 thinking", "content_block_delta 0 thinking_delta", "content_block_delta 0 signature_delta", "content_block_stop 0",
			"message_delta max_tokens"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, &servertest.Engine{Script: script(c.script...)}, harnessOptions{thinking: c.thinking})
			maxTokens := 50
			if c.name == "max_tokens" || strings.HasPrefix(c.name, "unclosed") {
				maxTokens = 3
			}
			body := fmt.Sprintf(`{"model":"m","max_tokens":%d,"stream":true,%s"messages":[{"role":"user","content":"x"}]}`, maxTokens, c.extra)
			st, hdr, raw := h.post("/v1/messages", body)
			if st != 200 || hdr.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("%d %s %s", st, hdr.Get("Content-Type"), raw)
			}
			events := readEvents(t, strings.NewReader(raw))
			want := append(append([]string{"message_start"}, c.want...), "message_stop")
			if got := shape(events); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			checkStreamContent(t, events)
		})
	}
}

// checkStreamContent checks the invariants of a stream's data: one message
// id, blocks started empty, tool_use inputs that parse to objects,
// signatures that verify, usage in message_start and message_delta.
func checkStreamContent(t *testing.T, events []sseEvent) {
	t.Helper()
	m := events[0].data["message"].(map[string]any)
	if id, _ := m["id"].(string); !strings.HasPrefix(id, "msg_") || m["role"] != "assistant" || m["type"] != "message" {
		t.Fatalf("message_start %v", m)
	}
	if u := m["usage"].(map[string]any); u["input_tokens"].(float64) <= 0 {
		t.Fatalf("message_start usage %v", u)
	}
	texts := map[int]*strings.Builder{}
	for _, e := range events {
		idx := -1
		if f, ok := e.data["index"].(float64); ok {
			idx = int(f)
		}
		switch e.name {
		case "content_block_start":
			b := e.data["content_block"].(map[string]any)
			texts[idx] = &strings.Builder{}
			switch b["type"] {
			case "text":
				if b["text"] != "" {
					t.Fatalf("text block starts with %v", b)
				}
			case "thinking":
				if b["thinking"] != "" || b["signature"] != "" {
					t.Fatalf("thinking block starts with %v", b)
				}
			case "tool_use":
				if id, _ := b["id"].(string); !strings.HasPrefix(id, "toolu_") || b["name"] != "get_weather" || fmt.Sprint(b["input"]) != "map[]" {
					t.Fatalf("tool_use block starts with %v", b)
				}
			}
		case "content_block_delta":
			d := e.data["delta"].(map[string]any)
			switch d["type"] {
			case "signature_delta":
				if !newSigner(nil).own(texts[idx].String(), d["signature"].(string)) {
					t.Fatalf("signature %v does not verify for %q", d["signature"], texts[idx].String())
				}
			case "input_json_delta":
				texts[idx].WriteString(d["partial_json"].(string))
			case "text_delta":
				texts[idx].WriteString(d["text"].(string))
			case "thinking_delta":
				texts[idx].WriteString(d["thinking"].(string))
			}
		case "message_delta":
			u := e.data["usage"].(map[string]any)
			if u["output_tokens"].(float64) <= 0 {
				t.Fatalf("message_delta usage %v", u)
			}
			for _, k := range []string{"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"} {
				if _, ok := u[k]; !ok {
					t.Fatalf("message_delta usage lacks %s: %v", k, u)
				}
			}
		}
	}
	for _, e := range events {
		if e.name == "content_block_start" && e.data["content_block"].(map[string]any)["type"] == "tool_use" {
			idx := int(e.data["index"].(float64))
			var args map[string]any
			if err := json.Unmarshal([]byte(texts[idx].String()), &args); err != nil || args["city"] != "Paris" {
				t.Fatalf("input_json_delta concatenates to %q", texts[idx].String())
			}
		}
	}
}

// The non-streamed message has the same blocks as the stream.
func TestNonStreamShape(t *testing.T) {
	s := append([]string{"Check.", "</think>\n\n", "Calling.\n\n"}, toolCall...)
	h := newHarness(t, &servertest.Engine{Script: script(s...)}, harnessOptions{thinking: true})
	st, _, raw := h.post("/v1/messages", `{"model":"m","max_tokens":50,"tools":[`+weatherTool+`],"messages":[{"role":"user","content":"x"}]}`)
	if st != 200 {
		t.Fatalf("%d %s", st, raw)
	}
	var m struct {
		ID, Type, Role, Model string
		Content               []map[string]any
		StopReason            *string `json:"stop_reason"`
		StopSequence          *string `json:"stop_sequence"`
		Usage                 map[string]int
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "fake-model" || *m.StopReason != "tool_use" || m.StopSequence != nil {
		t.Fatalf("%s", raw)
	}
	if len(m.Content) != 3 || m.Content[0]["type"] != "thinking" || m.Content[0]["thinking"] != "Check." || m.Content[1]["type"] != "text" || m.Content[2]["type"] != "tool_use" {
		t.Fatalf("content %v", m.Content)
	}
	if !newSigner(nil).own("Check.", m.Content[0]["signature"].(string)) {
		t.Fatalf("signature %v", m.Content[0]["signature"])
	}
	if in := m.Content[2]["input"].(map[string]any); in["city"] != "Paris" || !strings.HasPrefix(m.Content[2]["id"].(string), "toolu_") {
		t.Fatalf("tool_use %v", m.Content[2])
	}
	for _, k := range []string{"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"} {
		if _, ok := m.Usage[k]; !ok {
			t.Fatalf("usage lacks %s: %v", k, m.Usage)
		}
	}
	if !strings.Contains(h.logs.String(), "POST /v1/messages 200") || !strings.Contains(h.logs.String(), "finish=tool_use") {
		t.Fatalf("log:\n%s", h.logs.String())
	}
}

// cachingEngine reports part of the prompt as read from the cache.
type cachingEngine struct {
	*servertest.Engine
	cached int
}

func (e cachingEngine) Generate(ctx context.Context, g server.Generation, on func(string) bool) (server.Outcome, error) {
	out, err := e.Engine.Generate(ctx, g, on)
	out.CachedTokens = e.cached
	return out, err
}

// input_tokens + cache_read_input_tokens is the prompt, as Anthropic splits it.
func TestUsageSplitsCachedTokens(t *testing.T) {
	h := newHarness(t, cachingEngine{&servertest.Engine{}, 10}, harnessOptions{})
	body := `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hello there"}]}`
	_, _, count := h.post("/v1/messages/count_tokens", body)
	var c struct {
		InputTokens int `json:"input_tokens"`
	}
	json.Unmarshal([]byte(count), &c)
	_, _, raw := h.post("/v1/messages", body)
	var m struct{ Usage map[string]int }
	json.Unmarshal([]byte(raw), &m)
	if m.Usage["cache_read_input_tokens"] != 10 || m.Usage["input_tokens"]+10 != c.InputTokens || m.Usage["cache_creation_input_tokens"] != 0 {
		t.Fatalf("usage %v, count %d", m.Usage, c.InputTokens)
	}
}

// failingEngine fails after its first token, so the error arrives
// mid-stream.
type failingEngine struct{ *servertest.Engine }

func (e failingEngine) Generate(ctx context.Context, g server.Generation, on func(string) bool) (server.Outcome, error) {
	e.Engine.Generate(ctx, g, func(s string) bool { on(s); return false })
	return server.Outcome{}, errors.New("the disk went away")
}

func TestErrorsUseAnthropicsEnvelope(t *testing.T) {
	ok := `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"x"}]}`
	cases := []struct {
		name    string
		eng     server.Engine
		o       harnessOptions
		method  string
		path    string
		body    string
		header  []string
		status  int
		errType string
		msg     string
	}{
		{"invalid", &servertest.Engine{}, harnessOptions{}, "POST", "/v1/messages", `{"messages":[]}`, nil, 400, "invalid_request_error", "messages"},
		{"no key", &servertest.Engine{}, harnessOptions{apiKey: "k"}, "POST", "/v1/messages", ok, nil, 401, "authentication_error", "API key"},
		{"wrong key", &servertest.Engine{}, harnessOptions{apiKey: "k"}, "POST", "/v1/messages", ok, []string{"x-api-key", "nope"}, 401, "authentication_error", "API key"},
		{"wrong method", &servertest.Engine{}, harnessOptions{}, "GET", "/v1/messages", "", nil, 405, "invalid_request_error", "takes POST"},
		{"wrong content type", &servertest.Engine{}, harnessOptions{}, "POST", "/v1/messages", ok, []string{"Content-Type", "text/plain"}, 415, "invalid_request_error", "application/json"},
		{"too large", &servertest.Engine{}, harnessOptions{maxBody: 64}, "POST", "/v1/messages", strings.Replace(ok, `"x"`, `"`+strings.Repeat("x", 100)+`"`, 1), nil, 413, "request_too_large", "larger than 64 bytes"},
		{"loading", nil, harnessOptions{noEngine: true}, "POST", "/v1/messages", ok, nil, 503, "overloaded_error", "loading"},
		{"context overflow", &servertest.Engine{Context: 20}, harnessOptions{}, "POST", "/v1/messages", ok, nil, 400, "invalid_request_error", "context"},
		{"tool_choice any without tools", &servertest.Engine{}, harnessOptions{}, "POST", "/v1/messages", strings.Replace(ok, `"model"`, `"tool_choice":{"type":"any"},"model"`, 1), nil, 400, "invalid_request_error", "needs tools"},
		{"tool_use input not an object", &servertest.Engine{}, harnessOptions{}, "POST", "/v1/messages/count_tokens", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[1]}]}]}`, nil, 400, "invalid_request_error", "messages[1].content[0].input is not a JSON object"},
		{"engine panics", &servertest.Engine{Script: func(string) []string { panic("boom") }}, harnessOptions{}, "POST", "/v1/messages", ok, nil, 500, "api_error", "internal error"},
		{"engine fails", failingEngine{&servertest.Engine{}}, harnessOptions{}, "POST", "/v1/messages", ok, nil, 500, "api_error", "the disk went away"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.eng, c.o)
			req, _ := http.NewRequest(c.method, h.http.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(c.header); i += 2 {
				req.Header.Set(c.header[i], c.header[i+1])
			}
			resp, err := h.http.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e errorBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &e); err != nil || resp.StatusCode != c.status || e.Type != "error" || e.Error.Type != c.errType || !strings.Contains(e.Error.Message, c.msg) {
				t.Fatalf("%d %s, want %d %s containing %q", resp.StatusCode, raw, c.status, c.errType, c.msg)
			}
		})
	}
}

// Both of Claude Code's key headers pass the shared check, with its
// ?beta=true query and its anthropic-beta header.
func TestAPIKeyHeaders(t *testing.T) {
	h := newHarness(t, &servertest.Engine{}, harnessOptions{apiKey: "secret"})
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
	for _, hdr := range [][]string{{"x-api-key", "secret"}, {"Authorization", "Bearer secret"}} {
		if st, _, b := h.post("/v1/messages?beta=true", body, append(hdr, "anthropic-beta", "interleaved-thinking-2025-05-14")...); st != 200 {
			t.Fatalf("%v: %d %s", hdr, st, b)
		}
	}
}

// An error after the stream has started is an error event, and the
// stream ends without message_stop.
func TestErrorMidStreamIsAnErrorEvent(t *testing.T) {
	h := newHarness(t, failingEngine{&servertest.Engine{}}, harnessOptions{})
	st, _, raw := h.post("/v1/messages", `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
	events := readEvents(t, strings.NewReader(raw))
	last := events[len(events)-1]
	if st != 200 || events[0].name != "message_start" || last.name != "error" {
		t.Fatalf("%d %v", st, shape(events))
	}
	if e := last.data["error"].(map[string]any); e["type"] != "api_error" || !strings.Contains(e["message"].(string), "the disk went away") {
		t.Fatalf("error event %v", last.data)
	}
}

func TestQueueFullIs529Overloaded(t *testing.T) {
	h := newHarness(t, &servertest.Engine{PrefillDelay: 300 * time.Millisecond}, harnessOptions{queueLimit: 1})
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
	done := make(chan int, 2)
	for range 2 { // one runs, one waits
		go func() {
			st, _, _ := h.post("/v1/messages", body)
			done <- st
		}()
	}
	time.Sleep(100 * time.Millisecond)
	st, hdr, raw := h.post("/v1/messages", body)
	if st != 529 || hdr.Get("Retry-After") == "" || !strings.Contains(raw, `"type":"overloaded_error"`) {
		t.Fatalf("%d Retry-After %q %s", st, hdr.Get("Retry-After"), raw)
	}
	if a, b := <-done, <-done; a != 200 || b != 200 {
		t.Fatalf("queued requests: %d %d", a, b)
	}
}

func TestPingsDuringLongPrefill(t *testing.T) {
	h := newHarness(t, &servertest.Engine{PrefillDelay: 400 * time.Millisecond}, harnessOptions{keepAlive: 80 * time.Millisecond})
	_, _, raw := h.post("/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
	events := readEvents(t, strings.NewReader(raw))
	pings := 0
	for i, e := range events {
		if e.name == "ping" {
			pings++
			if i == 0 {
				t.Fatal("a ping before message_start")
			}
		}
	}
	if pings < 2 || events[0].name != "message_start" {
		t.Fatalf("%d pings in %v", pings, shape(events))
	}
}

func TestCountTokens(t *testing.T) {
	eng := &servertest.Engine{}
	h := newHarness(t, eng, harnessOptions{})
	body := `{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cch=1"},{"type":"text","text":"S"}],"tools":[` + weatherTool + `],"messages":[{"role":"user","content":"hi"}]}`
	st, _, raw := h.post("/v1/messages/count_tokens", body)
	var c map[string]int
	if err := json.Unmarshal([]byte(raw), &c); err != nil || st != 200 || len(c) != 1 {
		t.Fatalf("%d %s", st, raw)
	}
	// The fake tokenizer is one token per character of the rendered prompt.
	_, creq, _ := decodeBody(t, body, true)
	prompt, _ := h.srv.ApplyTemplate(creq)
	if c["input_tokens"] != len([]rune(prompt)) || strings.Contains(prompt, "billing") {
		t.Fatalf("input_tokens %d for a %d-character prompt", c["input_tokens"], len([]rune(prompt)))
	}
	if len(eng.Prompts()) != 0 {
		t.Fatal("count_tokens generated")
	}
}

// A client that goes away cancels the generation, frees the engine and
// leaves no goroutine behind (keep-alive pinger included).
func TestDisconnectCancelsGenerationWithoutLeaks(t *testing.T) {
	many := make([]string, 10000)
	for i := range many {
		many[i] = "x"
	}
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			eng := &servertest.Engine{Script: script(many...), TokenDelay: 5 * time.Millisecond}
			h := newHarness(t, eng, harnessOptions{keepAlive: 20 * time.Millisecond})
			body := fmt.Sprintf(`{"model":"m","max_tokens":20000,"stream":%v,"messages":[{"role":"user","content":"x"}]}`, stream)
			adaptertest.AbandonRequest(t, h.http, "/v1/messages", body, func() bool {
				st, _, _ := h.post("/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
				return st == 200
			})
			if !strings.Contains(h.logs.String(), "context canceled") {
				t.Fatalf("log does not record the cancellation:\n%s", h.logs.String())
			}
		})
	}
}
