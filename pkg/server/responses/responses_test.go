package responses

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/sample"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/httpapi"
	"github.com/nvmai/nvmai/pkg/server/internal/adaptertest"
	"github.com/nvmai/nvmai/pkg/server/internal/jsonobj"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// chatView is what a golden file shows of the core request.
type chatView struct {
	Messages          []chattemplate.Message
	Tools             []json.RawMessage
	ToolChoice        string
	ToolName          string `json:",omitempty"`
	ParallelToolCalls bool
	Thinking          *bool
	MaxTokens         int
	Format            bool
	Temperature       float64
	TopP              float64
	Skipped           []string
}

func requestFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no request fixtures: %v", err)
	}
	return files
}

// Every fixture body (Codex's own first turn, captured from codex-cli
// 0.171.0, and Codex-shaped later turns) is answered 200; the core request
// it maps to and the prompt the Qwen3.6 template renders from it are
// golden.
func TestRequestsMapAndRender(t *testing.T) {
	defaults := sample.Params{Temperature: 0.7, TopP: 0.95, TopK: 20}
	for _, file := range requestFiles(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var req request
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatal(err)
			}
			c, err := convert(&req, nil, defaults)
			if err != nil {
				t.Fatal(err)
			}
			v := chatView{Messages: c.chat.Messages, Tools: c.chat.Tools, ToolChoice: string(c.chat.ToolChoice), ToolName: c.chat.ToolName,
				ParallelToolCalls: c.chat.ParallelToolCalls, Thinking: c.chat.Thinking, MaxTokens: c.chat.MaxTokens, Format: c.chat.Format != nil,
				Temperature: c.chat.Sampling.Temperature, TopP: c.chat.Sampling.TopP, Skipped: c.skipped}
			raw, _ := jsonobj.Marshal(v)
			golden(t, name+".chat.json", indentJSON(t, string(raw))+"\n")

			h := newHarness(t, &servertest.Engine{Context: 1 << 20}, Options{})
			st, resp := h.post(string(body))
			if st != 200 {
				t.Fatalf("status %d: %s", st, resp)
			}
			golden(t, name+".prompt.txt", h.lastPrompt())
			if len(c.skipped) > 0 && strings.Count(h.logs.String(), "\n") != 1 {
				t.Fatalf("want one log line about skipped tools, got %q", h.logs.String())
			}
		})
	}
}

func TestRequestErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, body, param, text string
	}{
		{"input not string or items", `{"input":5}`, "input", "expected a string or an array"},
		{"item not an object", `{"input":[3]}`, "input[0]", "must be an object"},
		{"item without type", `{"input":[{"content":"x"}]}`, "input[0].type", "no type"},
		{"bad role", `{"input":[{"role":"robot","content":"x"}]}`, "input[0].role", `"robot"`},
		{"image in a user message", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x"}]}]}`, "input[0].content[0]", "text-only"},
		{"call without call_id", `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", "no call_id"},
		{"call arguments not JSON", `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{not json"}]}`, "input[0].arguments", "input[0].arguments is not a JSON object"},
		{"call arguments an array", `{"input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}]}`, "input[1].arguments", "string holding a JSON array"},
		{"call arguments a number", `{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":5}]}`, "input[0].arguments", "it is a JSON number"},
		{"output without call_id", `{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", "no call_id"},
		{"function tool without name", `{"input":"x","tools":[{"type":"function"}]}`, "tools[0].name", "no name"},
		{"tool not an object", `{"input":"x","tools":[1]}`, "tools[0]", "must be an object"},
		{"bad tool_choice", `{"input":"x","tool_choice":"sometimes"}`, "tool_choice", "sometimes"},
		{"max_output_tokens 0", `{"input":"x","max_output_tokens":0}`, "max_output_tokens", "at least 1"},
		{"bad text.format type", `{"input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type", "yaml"},
		{"schema without schema", `{"input":"x","text":{"format":{"type":"json_schema","name":"n"}}}`, "text.format.schema", "needs a schema"},
		{"unsupported schema keyword", `{"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"array","uniqueItems":true}}}}`, "text.format.schema", "uniqueItems"},
		{"temperature out of range", `{"input":"x","temperature":-1}`, "temperature", "temperature"},
		{"unknown previous response", `{"input":"x","previous_response_id":"resp_nope"}`, "previous_response_id", "resp_nope"},
		{"malformed JSON", `{"input":`, "", "malformed JSON"},
	}
	h := newHarness(t, &servertest.Engine{}, Options{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := h.post(c.body)
			e := adaptertest.DecodeOpenAIError(t, body)
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if st != 400 || e.Type != "invalid_request_error" || param != c.param || !strings.Contains(e.Message, c.text) {
				t.Fatalf("got %d %s, want 400 with param %q and %q in the message", st, body, c.param, c.text)
			}
		})
	}
}

// Unknown fields, and tool types the runtime cannot serve, are not errors.
func TestUnknownFieldsAndToolsAreIgnored(t *testing.T) {
	h := newHarness(t, &servertest.Engine{}, Options{})
	st, body := h.post(`{"input":"x","future_field":{"a":1},"truncation":"auto","metadata":{"k":"v"},"tools":[{"type":"file_search","vector_store_ids":["v"]},{"type":"mcp","server_label":"s"}],"tool_choice":{"type":"web_search"}}`)
	if st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	if !strings.Contains(h.logs.String(), "file_search, mcp") {
		t.Fatalf("log %q", h.logs.String())
	}
	if strings.Contains(h.lastPrompt(), "<tools>") {
		t.Fatalf("skipped tools were rendered:\n%s", h.lastPrompt())
	}
}

func TestThinkingFromReasoningEffort(t *testing.T) {
	cases := []struct {
		effort string
		want   *bool
	}{
		{"none", ptr(false)}, {"minimal", ptr(false)}, {"low", ptr(true)}, {"medium", ptr(true)}, {"high", ptr(true)}, {"xhigh", ptr(true)}, {"whatever", nil},
	}
	for _, c := range cases {
		got := thinkingFor(c.effort)
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("effort %q: got %v, want %v", c.effort, got, c.want)
		}
	}
}

// Responses answered with previous_response_id continue the held
// conversation: its input and output come before the new input, its
// instructions do not (as OpenAI documents).
func TestPreviousResponseChains(t *testing.T) {
	eng := &servertest.Engine{Script: script("Hel", "lo", "!")}
	h := newHarness(t, eng, Options{Keep: 2})
	id := func(body string) string {
		t.Helper()
		st, resp := h.post(body)
		if st != 200 {
			t.Fatalf("%d %s", st, resp)
		}
		var r struct{ ID string }
		json.Unmarshal([]byte(resp), &r)
		return r.ID
	}
	first := id(`{"instructions":"Be kind.","input":"first question","reasoning":{"effort":"none"}}`)
	second := id(fmt.Sprintf(`{"previous_response_id":%q,"input":"second question","reasoning":{"effort":"none"}}`, first))
	p := h.lastPrompt()
	for _, want := range []string{"first question", "Hello!<|im_end|>", "second question"} {
		if !strings.Contains(p, want) {
			t.Fatalf("the chained prompt lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "Be kind.") {
		t.Fatalf("instructions were carried over:\n%s", p)
	}
	third := id(fmt.Sprintf(`{"previous_response_id":%q,"input":"third question"}`, second))
	if p := h.lastPrompt(); !strings.Contains(p, "first question") || !strings.Contains(p, "second question") {
		t.Fatalf("a two-link chain lost a turn:\n%s", p)
	}
	// Keep 2: the first response is gone now, the second and third are held.
	if st, body := h.post(fmt.Sprintf(`{"previous_response_id":%q,"input":"x"}`, first)); st != 400 || !strings.Contains(body, first) || !strings.Contains(body, "previous_response_not_found") {
		t.Fatalf("evicted id: %d %s", st, body)
	}
	if st, _ := h.post(fmt.Sprintf(`{"previous_response_id":%q,"input":"x"}`, third)); st != 200 {
		t.Fatalf("held id refused: %d", st)
	}
	unstored := id(`{"input":"secret","store":false}`)
	if st, _ := h.post(fmt.Sprintf(`{"previous_response_id":%q,"input":"x"}`, unstored)); st != 400 {
		t.Fatalf("a store:false response was kept: %d", st)
	}
}

func TestStoreEvictsTheOldest(t *testing.T) {
	s := newStore(3)
	for i := range 10 {
		s.put(fmt.Sprint(i), []chattemplate.Message{{Role: "user", Content: fmt.Sprint(i)}})
	}
	if s.len() != 3 {
		t.Fatalf("holds %d", s.len())
	}
	for i := range 10 {
		if _, ok := s.get(fmt.Sprint(i)); ok != (i >= 7) {
			t.Fatalf("id %d held %v", i, ok)
		}
	}
	none := newStore(0)
	none.put("a", nil)
	if none.len() != 0 {
		t.Fatal("a zero store kept something")
	}
}

// A reasoning item's text is the reasoning of the assistant turn after it,
// whether it came as content or (summary only) as summary.
func TestReasoningItemsFeedBack(t *testing.T) {
	cases := []struct{ name, item string }{
		{"content", `{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"R1"}]}`},
		{"summary", `{"type":"reasoning","summary":[{"type":"summary_text","text":"R1"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := `[{"role":"user","content":"q"},` + c.item + `,{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"out"}]`
			msgs, _, err := inputMessages(json.RawMessage(in))
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != 3 || msgs[1].Role != "assistant" || msgs[1].ReasoningContent == nil || *msgs[1].ReasoningContent != "R1" || len(msgs[1].ToolCalls) != 1 || string(msgs[1].ToolCalls[0].Arguments) != `{"a":1}` {
				b, _ := json.Marshal(msgs)
				t.Fatalf("got %s", b)
			}
		})
	}
}

// With a Qwen3.8 template reasoning.effort reaches reasoning_effort
// (high → xhigh; none and minimal turn thinking off), and an earlier
// reasoning item is rendered back with its assistant turn.
func TestReasoningEffortQwen38(t *testing.T) {
	tmpl, err := chattemplate.Load(filepath.Join("..", "..", "chattemplate", "testdata", "models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	eng := &servertest.Engine{Script: script("ok")}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(eng, tmpl)
	oh := httpapi.New(s, httpapi.Options{})
	New(s, Options{Log: io.Discard}).Mount(oh)
	hs := httptest.NewServer(oh)
	defer hs.Close()
	const (
		xhigh = "Reasoning effort is set to xhigh. Please think carefully and thoroughly before you answer.\n\n"
		low   = "Reasoning effort is set to low. Keep your thinking brief and answer directly.\n\n"
		input = `"instructions":"S","input":[{"type":"message","role":"user","content":"Q1"},{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"R1"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A1"}]},{"type":"message","role":"user","content":"Q2"}]`
	)
	for _, c := range []struct {
		body, head string
		think      bool
	}{
		{`{` + input + `}`, xhigh, true},
		{`{"reasoning":{"effort":"low"},` + input + `}`, low, true},
		{`{"reasoning":{"effort":"medium"},` + input + `}`, "", true},
		{`{"reasoning":{"effort":"high"},` + input + `}`, xhigh, true},
		{`{"reasoning":{"effort":"xhigh"},` + input + `}`, xhigh, true},
		{`{"reasoning":{"effort":"minimal"},` + input + `}`, "", false},
		{`{"reasoning":{"effort":"none"},` + input + `}`, "", false},
	} {
		resp, err := hs.Client().Post(hs.URL+Path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.body, resp.StatusCode, b)
		}
		p := eng.Prompts()
		prompt := p[len(p)-1]
		if !strings.HasPrefix(prompt, "<|im_start|>system\n"+c.head+"S<|im_end|>\n") {
			t.Errorf("%s: prompt %q, want the system turn to start %q", c.body, prompt, c.head)
		}
		if !strings.Contains(prompt, "<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>") {
			t.Errorf("%s: the earlier reasoning is not rendered back: %q", c.body, prompt)
		}
		if open := strings.HasSuffix(prompt, "<think>\n") && !strings.HasSuffix(prompt, "</think>\n\n"); open != c.think {
			t.Errorf("%s: thinking %v, want %v", c.body, open, c.think)
		}
	}
}
