package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

type harness struct {
	t      *testing.T
	eng    *servertest.Engine
	srv    *server.Server
	http   *httptest.Server
	client oai.Client
	logs   *bytes.Buffer
}

// hostOptions are the host's options and the adapter's keep-alive.
type hostOptions struct {
	httpapi.Options
	KeepAlive time.Duration
}

func newHarness(t *testing.T, eng *servertest.Engine, opt hostOptions, cfg server.Config) *harness {
	t.Helper()
	logs := &bytes.Buffer{}
	if cfg.Thinking == nil {
		off := false // plain answers; tests of reasoning turn it on
		cfg.Thinking = &off
	}
	if cfg.Log == nil {
		cfg.Log = server.TextLogger(logs)
	}
	s := server.New(cfg)
	if eng != nil {
		s.SetEngine(eng, servertest.Renderer{})
	}
	h := httpapi.New(s, opt.Options)
	New(s, Options{KeepAlive: opt.KeepAlive}).Mount(h)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c := adaptertest.OpenAIClient(hs, "test-key")
	return &harness{t: t, eng: eng, srv: s, http: hs, client: c, logs: logs}
}

// post sends a raw body and returns status, headers and body.
func (h *harness) post(path, contentType, body string) (int, http.Header, string) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.http.URL+path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
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

func userParams(text string) oai.ChatCompletionNewParams {
	return oai.ChatCompletionNewParams{Model: "fake-model", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(text)}}
}

// chatparseWorks reports whether the real reasoning/tool-call parser is in
// (its API landed before its implementation).
func chatparseWorks() bool {
	p := chatparse.New(chatparse.Options{InReasoning: true})
	evs := append(p.Push("a</think>b"), p.Finish()...)
	return len(evs) > 0 && evs[0].Kind == chatparse.Reasoning
}

func TestChatStreamAccumulatesToTheNonStreamAnswer(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: script("Hel", "lo", ", wor", "ld", "!")}, hostOptions{}, server.Config{})
	ctx := context.Background()
	p := userParams("Hi")
	p.Seed = oai.Int(1)
	resp, err := h.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	stream := h.client.Chat.Completions.NewStreaming(ctx, p)
	var acc oai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	got, want := acc.Choices[0], resp.Choices[0]
	if got.Message.Content != want.Message.Content || got.FinishReason != want.FinishReason || want.Message.Content != "Hello, world!" {
		t.Fatalf("stream %q/%s, non-stream %q/%s", got.Message.Content, got.FinishReason, want.Message.Content, want.FinishReason)
	}
	if want.FinishReason != "stop" || resp.Usage.PromptTokens == 0 || resp.Usage.CompletionTokens != 6 {
		t.Fatalf("finish %s usage %+v", want.FinishReason, resp.Usage)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" {
		t.Fatalf("id %q object %q", resp.ID, resp.Object)
	}
}

// sseEvents reads a raw SSE response into its data payloads and counts
// keep-alive comments.
func sseEvents(t *testing.T, body io.Reader) (data []string, comments int) {
	t.Helper()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, ":"):
			comments++
		}
	}
	return data, comments
}

type rawChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Delta        map[string]json.RawMessage `json:"delta"`
		FinishReason *string                    `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

func TestChatStreamChunkInvariants(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: script("a", "b", "c")}, hostOptions{}, server.Config{})
	for _, includeUsage := range []bool{false, true} {
		t.Run(fmt.Sprint("include_usage=", includeUsage), func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":%v},"messages":[{"role":"user","content":"x"}]}`, includeUsage)
			resp, err := h.http.Client().Post(h.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type %q", ct)
			}
			data, _ := sseEvents(t, resp.Body)
			if data[len(data)-1] != "[DONE]" {
				t.Fatalf("last event %q, want [DONE]", data[len(data)-1])
			}
			var chunks []rawChunk
			for _, d := range data[:len(data)-1] {
				var c rawChunk
				if err := json.Unmarshal([]byte(d), &c); err != nil {
					t.Fatalf("%q: %v", d, err)
				}
				chunks = append(chunks, c)
			}
			usageChunks := 0
			for i, c := range chunks {
				if c.ID != chunks[0].ID || c.Object != "chat.completion.chunk" {
					t.Fatalf("chunk %d id %q object %q", i, c.ID, c.Object)
				}
				if c.Usage != nil {
					usageChunks++
					if len(c.Choices) != 0 || i != len(chunks)-1 {
						t.Fatalf("usage chunk %d has choices or is not last", i)
					}
					continue
				}
				_, hasRole := c.Choices[0].Delta["role"]
				if hasRole != (i == 0) {
					t.Fatalf("chunk %d: role present %v", i, hasRole)
				}
			}
			if want := map[bool]int{false: 0, true: 1}[includeUsage]; usageChunks != want {
				t.Fatalf("%d usage chunks, want %d", usageChunks, want)
			}
			last := chunks[len(chunks)-1-usageChunks]
			if f := last.Choices[0].FinishReason; f == nil || *f != "stop" || len(last.Choices[0].Delta) != 0 {
				t.Fatalf("final chunk %+v", last)
			}
		})
	}
}

func TestStopStringsAndMaxTokens(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: script("Hel", "lo, w", "or", "ld", " é", "t", "é")}, hostOptions{}, server.Config{})
	ctx := context.Background()
	cases := []struct {
		name    string
		stop    []string
		max     int64
		content string
		finish  string
	}{
		{"stop across tokens", []string{"o, wo"}, 0, "Hell", "stop"},
		{"unmatched stop prefix released", []string{"wox"}, 0, "Hello, world été", "stop"},
		{"multibyte stop", []string{"té"}, 0, "Hello, world é", "stop"},
		{"max tokens", nil, 2, "Hello, w", "length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				p := userParams("x")
				if tc.stop != nil {
					p.Stop = oai.ChatCompletionNewParamsStopUnion{OfStringArray: tc.stop}
				}
				if tc.max > 0 {
					p.MaxTokens = oai.Int(tc.max)
				}
				var content, finish string
				if stream {
					s := h.client.Chat.Completions.NewStreaming(ctx, p)
					var acc oai.ChatCompletionAccumulator
					for s.Next() {
						acc.AddChunk(s.Current())
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					content, finish = acc.Choices[0].Message.Content, acc.Choices[0].FinishReason
				} else {
					r, err := h.client.Chat.Completions.New(ctx, p)
					if err != nil {
						t.Fatal(err)
					}
					content, finish = r.Choices[0].Message.Content, r.Choices[0].FinishReason
				}
				if content != tc.content || finish != tc.finish {
					t.Fatalf("stream=%v: %q/%s, want %q/%s", stream, content, finish, tc.content, tc.finish)
				}
			}
		})
	}
}

// Without --strict-max-tokens a max_tokens beyond what the context leaves
// is lowered to fit: the reply runs to the context and ends with finish
// reason length, as llama-server answers (issue #39 item 5).
func TestMaxTokensLoweredToFit(t *testing.T) {
	many := make([]string, 300)
	for i := range many {
		many[i] = "a"
	}
	h := newHarness(t, &servertest.Engine{Context: 128, Script: script(many...)}, hostOptions{}, server.Config{})
	status, _, body := h.post("/v1/chat/completions", "application/json", `{"max_tokens":32000,"messages":[{"role":"user","content":"hello there"}]}`)
	var resp struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || status != 200 || len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("%d %s: want 200 ending with finish_reason length", status, body)
	}
}

func TestErrorsUseTheEnvelope(t *testing.T) {
	// --strict-max-tokens: prompt + max_tokens beyond the context is a 400 (TestMaxTokensLoweredToFit: the default).
	h := newHarness(t, &servertest.Engine{Context: 128}, hostOptions{Options: httpapi.Options{MaxBody: 2048}}, server.Config{StrictMaxTokens: true})
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 3000) + `"}]}`
	cases := []struct {
		name, path, ctype, body string
		status                  int
		want                    string // in the message
		param                   string
	}{
		{"malformed JSON", "/v1/chat/completions", "application/json", `{"messages":[`, 400, "malformed JSON", ""},
		{"syntax error offset", "/v1/chat/completions", "application/json", `{"messages": x}`, 400, "byte offset", ""},
		{"wrong type names the field", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}`, 400, `"temperature"`, "temperature"},
		{"wrong nested type", "/v1/chat/completions", "application/json", `{"messages":[{"role":5}]}`, 400, "messages.0.role", "messages.0.role"},
		{"not an object", "/v1/chat/completions", "application/json", `[1,2]`, 400, "JSON object", ""},
		{"empty body", "/v1/chat/completions", "application/json", ``, 400, "empty", ""},
		{"two values", "/v1/chat/completions", "application/json", `{} {}`, 400, "more than one", ""},
		{"wrong content type", "/v1/chat/completions", "text/plain", `{}`, 415, "application/json", ""},
		{"body over the cap", "/v1/chat/completions", "application/json", big, 413, "larger than 2048", ""},
		{"no messages", "/v1/chat/completions", "application/json", `{"messages":[]}`, 400, "messages is empty", "messages"},
		{"unknown role", "/v1/chat/completions", "application/json", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "wizard", "messages[0].role"},
		{"image part", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "text-only", "messages[0].content[0]"},
		{"n above 1", "/v1/chat/completions", "application/json", `{"n":2,"messages":[{"role":"user","content":"x"}]}`, 400, "n must be 1", "n"},
		{"both max tokens", "/v1/chat/completions", "application/json", `{"max_tokens":5,"max_completion_tokens":5,"messages":[{"role":"user","content":"x"}]}`, 400, "not both", "max_tokens"},
		{"bad temperature", "/v1/chat/completions", "application/json", `{"temperature":-1,"messages":[{"role":"user","content":"x"}]}`, 400, "temperature", "temperature"},
		{"too many stops", "/v1/chat/completions", "application/json", `{"stop":["a","b","c","d","e"],"messages":[{"role":"user","content":"x"}]}`, 400, "at most 4", "stop"},
		{"context overflow names both numbers", "/v1/chat/completions", "application/json", `{"max_tokens":100,"messages":[{"role":"user","content":"hello there"}]}`, 400, "max_tokens asks for 100", "max_tokens"},
		{"prompt over the context", "/v1/completions", "application/json", `{"prompt":"` + strings.Repeat("y", 130) + `"}`, 400, "the prompt has more than 128 tokens", "messages"},
		{"template error is a 400", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"},{"role":"system","content":"late"}]}`, 400, "System message must be at the beginning.", "messages"},
		{"arguments a string holding an array", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, 400, "messages[1].tool_calls[0].function.arguments is not a JSON object", "messages[1].tool_calls[0].function.arguments"},
		{"arguments not JSON", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c","type":"function","function":{"name":"f","arguments":"{not json"}}]}]}`, 400, "messages[1].tool_calls[1].function.arguments is not a JSON object", "messages[1].tool_calls[1].function.arguments"},
		{"arguments a JSON array", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":[1]}}]}]}`, 400, "function.arguments is not a JSON object (it is a JSON array)", "messages[1].tool_calls[0].function.arguments"},
		{"bad tool_choice", "/v1/chat/completions", "application/json", `{"tool_choice":"sometimes","messages":[{"role":"user","content":"x"}]}`, 400, "sometimes", "tool_choice"},
		{"named tool missing", "/v1/chat/completions", "application/json", `{"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"b"}},"messages":[{"role":"user","content":"x"}]}`, 400, `"b"`, "tool_choice"},
		{"unknown endpoint", "/v1/embeddings", "application/json", `{}`, 404, "no endpoint", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := h.post(tc.path, tc.ctype, tc.body)
			e := adaptertest.DecodeOpenAIError(t, body)
			if status != tc.status || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("%d %q, want %d containing %q", status, e.Message, tc.status, tc.want)
			}
			if tc.param != "" && (e.Param == nil || *e.Param != tc.param) {
				t.Fatalf("param %v, want %q", e.Param, tc.param)
			}
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		resp, err := h.http.Client().Get(h.http.URL + "/v1/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
			t.Fatalf("%d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
	t.Run("unknown fields are ignored", func(t *testing.T) {
		status, _, body := h.post("/v1/chat/completions", "application/json", `{"user":"u","metadata":{"a":1},"store":false,"prompt_cache_key":"k","messages":[{"role":"user","content":"x","extra":1}]}`)
		if status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	})
}

func TestAPIKeyAndLoopbackHealth(t *testing.T) {
	h := newHarness(t, &servertest.Engine{}, hostOptions{Options: httpapi.Options{APIKey: "test-key"}}, server.Config{})
	if _, err := h.client.Chat.Completions.New(context.Background(), userParams("x")); err != nil {
		t.Fatalf("Bearer key refused: %v", err)
	}
	for name, set := range map[string]func(*http.Request){
		"no key":    func(*http.Request) {},
		"wrong key": func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") },
	} {
		req, _ := http.NewRequest("GET", h.http.URL+"/v1/models", nil)
		set(req)
		resp, err := h.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%s: %d, want 401", name, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", h.http.URL+"/v1/models", nil)
	req.Header.Set("x-api-key", "test-key")
	resp, err := h.http.Client().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("x-api-key: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if resp, _ := h.http.Client().Get(h.http.URL + "/health"); resp.StatusCode != 200 {
		t.Fatalf("/health needs no key: %d", resp.StatusCode)
	}
}

func TestHealthWhileLoadingAndModels(t *testing.T) {
	h := newHarness(t, nil, hostOptions{}, server.Config{})
	resp, err := h.http.Client().Get(h.http.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("/health while loading: %d", resp.StatusCode)
	}
	if st, _, _ := h.post("/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}]}`); st != 503 {
		t.Fatalf("chat while loading: %d", st)
	}
	h.srv.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	resp, _ = h.http.Client().Get(h.http.URL + "/health")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health once loaded: %d", resp.StatusCode)
	}
	page, err := h.client.Models.List(context.Background())
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "fake-model" || page.Object != "list" {
		t.Fatalf("models: %+v %v", page, err)
	}
}

func TestCompletionsEndpoint(t *testing.T) {
	h := newHarness(t, &servertest.Engine{Script: script(" Paris", ".", " It")}, hostOptions{}, server.Config{})
	ctx := context.Background()
	p := oai.CompletionNewParams{Model: "m", Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("The capital of France is")}, Stop: oai.CompletionNewParamsStopUnion{OfString: oai.String(".")}}
	r, err := h.client.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != " Paris" || r.Choices[0].FinishReason != "stop" || r.Object != "text_completion" {
		t.Fatalf("%+v", r.Choices[0])
	}
	s := h.client.Completions.NewStreaming(ctx, p)
	var text strings.Builder
	for s.Next() {
		if c := s.Current(); len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Text)
		}
	}
	if s.Err() != nil || text.String() != " Paris" {
		t.Fatalf("stream %q %v", text.String(), s.Err())
	}
	p.MaxTokens = oai.Int(1)
	p.Stop = oai.CompletionNewParamsStopUnion{}
	if r, _ := h.client.Completions.New(ctx, p); r.Choices[0].FinishReason != "length" || r.Choices[0].Text != " Paris" {
		t.Fatalf("max_tokens 1: %+v", r.Choices[0])
	}
}

var weatherTool = oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:       "get_weather",
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
})

// The tool loop: the model's XML call comes back as tool_calls; the client
// sends it back with JSON-string arguments and the result, which must
// render (arguments decoded to an object) and be answered.
func TestToolCallLoop(t *testing.T) {
	call := []string{"<tool_call>\n", "<function=get_weather>\n", "<parameter=city>\n", "Paris\n", "</parameter>\n", "</function>\n", "</tool_call>"}
	eng := &servertest.Engine{Script: func(prompt string) []string {
		if strings.Contains(prompt, "<tool_response>") {
			return []string{"Done.", "</think>\n\n", "It is ", "sunny."}
		}
		return append([]string{"Let me check.", "</think>\n\n"}, call...)
	}}
	on := true
	h := newHarness(t, eng, hostOptions{}, server.Config{Thinking: &on})
	ctx := context.Background()
	p := userParams("Weather in Paris?")
	p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
	if chatparseWorks() {
		r, err := h.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		m := r.Choices[0].Message
		if r.Choices[0].FinishReason != "tool_calls" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || !strings.HasPrefix(m.ToolCalls[0].ID, "call_") {
			t.Fatalf("%+v", r.Choices[0])
		}
		var args map[string]any
		if json.Unmarshal([]byte(m.ToolCalls[0].Function.Arguments), &args) != nil || args["city"] != "Paris" {
			t.Fatalf("arguments %q", m.ToolCalls[0].Function.Arguments)
		}
		if !strings.Contains(m.RawJSON(), `"reasoning_content":"Let me check."`) {
			t.Fatalf("reasoning missing: %s", m.RawJSON())
		}
		s := h.client.Chat.Completions.NewStreaming(ctx, p)
		var acc oai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if s.Err() != nil || len(acc.Choices[0].Message.ToolCalls) != 1 || acc.Choices[0].Message.ToolCalls[0].Function.Arguments != m.ToolCalls[0].Function.Arguments {
			t.Fatalf("streamed calls %+v (%v)", acc.Choices[0].Message.ToolCalls, s.Err())
		}
	} else {
		t.Log("chatparse is still a stub: the parse half of the loop is not checked")
	}
	// Second round, as an SDK client sends it.
	p.Messages = append(p.Messages,
		oai.ChatCompletionMessageParamUnion{OfAssistant: &oai.ChatCompletionAssistantMessageParam{ToolCalls: []oai.ChatCompletionMessageToolCallUnionParam{{
			OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1", Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city": "Paris"}`}},
		}}}},
		oai.ToolMessage("sunny, 24 °C", "call_1"))
	r, err := h.client.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Message.Content != "It is sunny." && !strings.HasSuffix(r.Choices[0].Message.Content, "It is sunny.") {
		t.Fatalf("answer %q", r.Choices[0].Message.Content)
	}
	prompts := eng.Prompts()
	last := prompts[len(prompts)-1]
	for _, want := range []string{"<function=get_weather>\n<parameter=city>\nParis\n</parameter>", "<tool_response>\nsunny, 24 °C\n</tool_response>", `{"function":{"name":"get_weather"`} {
		if !strings.Contains(last, want) {
			t.Fatalf("rendered prompt lacks %q:\n%s", want, last)
		}
	}
}

// Tool objects and call arguments reach the template in the client's key
// order (the template's tojson prints them in that order).
func TestToolsKeepTheClientsKeyOrder(t *testing.T) {
	eng := &servertest.Engine{}
	h := newHarness(t, eng, hostOptions{}, server.Config{})
	body := `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"write","arguments":"{\"path\": \"a.txt\", \"content\": \"hi\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],` +
		`"tools":[{"type":"function","function":{"name":"write","parameters":{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}}}}}]}`
	if st, _, b := h.post("/v1/chat/completions", "application/json", body); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	p := eng.Prompts()[0]
	for _, want := range []string{`{"type":"function","function":{"name":"write","parameters":{"type":"object","properties":{"path":{"type":"string"},"content"`, "<parameter=path>\na.txt\n</parameter>\n<parameter=content>\nhi\n"} {
		if !strings.Contains(p, want) {
			t.Fatalf("prompt lacks %q:\n%s", want, p)
		}
	}
}

func TestToolChoiceForcesTheCallPrefix(t *testing.T) {
	eng := &servertest.Engine{}
	h := newHarness(t, eng, hostOptions{}, server.Config{})
	ctx := context.Background()
	cases := []struct {
		choice oai.ChatCompletionToolChoiceOptionUnionParam
		suffix string
		tools  bool
	}{
		{oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("required")}, "<think>\n\n</think>\n\n<tool_call>\n", true},
		{oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}), "<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n", true},
		{oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("none")}, "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
	}
	for _, tc := range cases {
		p := userParams("x")
		p.Tools = []oai.ChatCompletionToolUnionParam{weatherTool}
		p.ToolChoice = tc.choice
		if _, err := h.client.Chat.Completions.New(ctx, p); err != nil {
			t.Fatal(err)
		}
		prompts := eng.Prompts()
		last := prompts[len(prompts)-1]
		if !strings.HasSuffix(last, tc.suffix) || strings.Contains(last, "<tools>") != tc.tools {
			t.Fatalf("prompt:\n%s\nwant suffix %q, tools rendered %v", last, tc.suffix, tc.tools)
		}
	}
}

func TestThinkingControls(t *testing.T) {
	eng := &servertest.Engine{}
	off := false
	h := newHarness(t, eng, hostOptions{}, server.Config{Thinking: &off})
	cases := []struct {
		body  string
		think bool
	}{
		{`{"messages":[{"role":"user","content":"x"}]}`, false}, // server default off
		{`{"reasoning_effort":"high","messages":[{"role":"user","content":"x"}]}`, true},
		{`{"chat_template_kwargs":{"enable_thinking":true},"reasoning_effort":"none","messages":[{"role":"user","content":"x"}]}`, true},
		{`{"reasoning_effort":"none","messages":[{"role":"user","content":"x"}]}`, false},
		{`{"add_generation_prompt":false,"reasoning_effort":"high","messages":[{"role":"user","content":"x"}]}`, false},
	}
	for _, tc := range cases {
		if st, _, body := h.post("/apply-template", "application/json", tc.body); st != 200 {
			t.Fatalf("%d %s", st, body)
		} else {
			var out struct{ Prompt string }
			json.Unmarshal([]byte(body), &out)
			if open := strings.HasSuffix(out.Prompt, "<think>\n") && !strings.HasSuffix(out.Prompt, "</think>\n\n"); open != tc.think {
				t.Fatalf("%s → %q", tc.body, out.Prompt)
			}
		}
	}
}

func TestQueueFullAnswers429WithRetryAfter(t *testing.T) {
	eng := &servertest.Engine{PrefillDelay: 300 * time.Millisecond}
	h := newHarness(t, eng, hostOptions{}, server.Config{QueueLimit: 1})
	done := make(chan int, 2)
	for range 2 { // one runs, one waits
		go func() {
			st, _, _ := h.post("/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}]}`)
			done <- st
		}()
	}
	time.Sleep(100 * time.Millisecond)
	st, hdr, body := h.post("/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}]}`)
	if st != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "rate_limit_error") {
		t.Fatalf("%d Retry-After %q %s", st, hdr.Get("Retry-After"), body)
	}
	if a, b := <-done, <-done; a != 200 || b != 200 {
		t.Fatalf("queued requests: %d %d", a, b)
	}
}

func TestKeepAliveDuringLongPrefill(t *testing.T) {
	eng := &servertest.Engine{PrefillDelay: 400 * time.Millisecond}
	h := newHarness(t, eng, hostOptions{KeepAlive: 80 * time.Millisecond}, server.Config{})
	resp, err := h.http.Client().Post(h.http.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, comments := sseEvents(t, resp.Body)
	if comments < 2 || !strings.Contains(data[0], `"role":"assistant"`) {
		t.Fatalf("%d keep-alive comments, first event %q", comments, data[0])
	}
}

func TestDisconnectCancelsGeneration(t *testing.T) {
	many := make([]string, 10000)
	for i := range many {
		many[i] = "x"
	}
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			eng := &servertest.Engine{Script: script(many...), TokenDelay: 5 * time.Millisecond}
			h := newHarness(t, eng, hostOptions{}, server.Config{})
			body := fmt.Sprintf(`{"stream":%v,"messages":[{"role":"user","content":"x"}]}`, stream)
			// The engine must be free again well before the 50 s script ends.
			adaptertest.AbandonRequest(t, h.http, "/v1/chat/completions", body, func() bool {
				st, _, _ := h.post("/v1/completions", "application/json", `{"prompt":"p","max_tokens":1}`)
				return st == 200
			})
			if !strings.Contains(h.logs.String(), "context canceled") {
				t.Fatalf("log does not record the cancellation:\n%s", h.logs.String())
			}
		})
	}
}

func TestPanicInTheEngineIsA500NotACrash(t *testing.T) {
	eng := &servertest.Engine{Script: func(string) []string { panic("boom") }}
	h := newHarness(t, eng, hostOptions{}, server.Config{})
	st, _, body := h.post("/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}]}`)
	if st != 500 || !strings.Contains(body, "server_error") {
		t.Fatalf("%d %s", st, body)
	}
	if st, _, _ := h.post("/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}]}`); st != 500 {
		t.Fatalf("the queue was not released after the panic: %d", st)
	}
}

// prepareOnFake hands a mapped request to a core server over the fake
// engine, as a fuzzer's last step: PrepareChat may refuse it but must not
// panic.
func prepareOnFake(creq *server.ChatRequest) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	if job, err := s.PrepareChat(creq); err == nil {
		job.Cancel()
	}
}

func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1}"}}]}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x"],"temperature":0.5,"seed":-3}`,
		`{"messages":[{"role":"developer","content":null}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req chatRequest
		if httpapi.Decode(strings.NewReader(string(body)), &req) != nil {
			return
		}
		creq, err := toChat(&req, samplingDefaults)
		if err != nil {
			return
		}
		prepareOnFake(creq)
	})
}

// A generation longer than the server's ReadTimeout completes: the read
// deadline that guards slow request bodies must not cancel the request.
func TestGenerationOutlivesTheReadTimeout(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{PrefillDelay: 600 * time.Millisecond}, servertest.Renderer{})
	hs := httptest.NewUnstartedServer(host(s))
	hs.Config = httpapi.NewHTTPServer(host(s))
	hs.Config.ReadTimeout = 200 * time.Millisecond
	hs.Start()
	defer hs.Close()
	for _, stream := range []bool{false, true} {
		resp, err := hs.Client().Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(`{"stream":%v,"messages":[{"role":"user","content":"x"}]}`, stream)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "Hello!") && !strings.Contains(string(b), `"lo"`) {
			t.Fatalf("stream=%v: %d %s", stream, resp.StatusCode, b)
		}
	}
}

// Output that never reaches </think> is all reasoning, cut by length.
func TestUnclosedReasoningIsAllReasoning(t *testing.T) {
	if !chatparseWorks() {
		t.Skip("chatparse is still a stub")
	}
	on := true
	h := newHarness(t, &servertest.Engine{Script: script("Let ", "me ", "think ", "more")}, hostOptions{}, server.Config{Thinking: &on})
	p := userParams("x")
	p.MaxTokens = oai.Int(3)
	r, err := h.client.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].FinishReason != "length" || r.Choices[0].Message.Content != "" || !strings.Contains(r.Choices[0].Message.RawJSON(), `"reasoning_content":"Let me think "`) {
		t.Fatalf("%s / %s", r.Choices[0].FinishReason, r.Choices[0].Message.RawJSON())
	}
}

// With a Qwen3.8 template reasoning_effort reaches the template's
// reasoning_effort (high → xhigh, none/minimal → thinking off), wrong
// values are a 400 naming the field, and earlier reasoning is rendered back.
func TestReasoningEffortQwen38(t *testing.T) {
	eng := &servertest.Engine{}
	on := true
	h := newHarness(t, eng, hostOptions{}, server.Config{Thinking: &on})
	tmpl, err := chattemplate.Load(filepath.Join("..", "..", "chattemplate", "testdata", "models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	h.srv.SetEngine(eng, tmpl)
	const msgs = `"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},{"role":"assistant","content":"A1","reasoning_content":"R1"},{"role":"user","content":"Q2"}]`
	cases := []struct {
		body   string
		head   string // the system turn's text before "S"
		think  bool
		status int
		param  string
	}{
		{`{` + msgs + `}`, "Reasoning effort is set to xhigh. Please think carefully and thoroughly before you answer.\n\n", true, 200, ""},
		{`{"reasoning_effort":"low",` + msgs + `}`, "Reasoning effort is set to low. Keep your thinking brief and answer directly.\n\n", true, 200, ""},
		{`{"reasoning_effort":"medium",` + msgs + `}`, "", true, 200, ""},
		{`{"reasoning_effort":"high",` + msgs + `}`, "Reasoning effort is set to xhigh. Please think carefully and thoroughly before you answer.\n\n", true, 200, ""},
		{`{"reasoning_effort":"xhigh",` + msgs + `}`, "Reasoning effort is set to xhigh. Please think carefully and thoroughly before you answer.\n\n", true, 200, ""},
		{`{"reasoning_effort":"minimal",` + msgs + `}`, "", false, 200, ""},
		{`{"reasoning_effort":"none",` + msgs + `}`, "", false, 200, ""},
		{`{"chat_template_kwargs":{"reasoning_effort":"low"},` + msgs + `}`, "Reasoning effort is set to low. Keep your thinking brief and answer directly.\n\n", true, 200, ""},
		{`{"reasoning_effort":"max",` + msgs + `}`, "", false, 400, "reasoning_effort"},
		{`{"reasoning_effort":"",` + msgs + `}`, "", false, 400, "reasoning_effort"},
		{`{"chat_template_kwargs":{"reasoning_effort":"high"},` + msgs + `}`, "", false, 400, "chat_template_kwargs.reasoning_effort"},
	}
	for _, tc := range cases {
		st, _, body := h.post("/apply-template", "application/json", tc.body)
		if st != tc.status {
			t.Fatalf("%s: %d %s", tc.body, st, body)
		}
		if st != 200 {
			var e struct{ Error struct{ Param string } }
			json.Unmarshal([]byte(body), &e)
			if e.Error.Param != tc.param {
				t.Errorf("%s: param %q, want %q (%s)", tc.body, e.Error.Param, tc.param, body)
			}
			continue
		}
		var out struct{ Prompt string }
		json.Unmarshal([]byte(body), &out)
		if !strings.HasPrefix(out.Prompt, "<|im_start|>system\n"+tc.head+"S<|im_end|>\n") {
			t.Errorf("%s: prompt %q, want the system turn to start %q", tc.body, out.Prompt, tc.head)
		}
		if !strings.Contains(out.Prompt, "<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>") {
			t.Errorf("%s: the earlier reasoning is not rendered back: %q", tc.body, out.Prompt)
		}
		if open := strings.HasSuffix(out.Prompt, "<think>\n") && !strings.HasSuffix(out.Prompt, "</think>\n\n"); open != tc.think {
			t.Errorf("%s: thinking %v, want %v", tc.body, open, tc.think)
		}
	}
}
