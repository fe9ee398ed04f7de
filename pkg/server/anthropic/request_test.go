package anthropic

import (
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/render")

// ownSig stands for this server's signature of the thinking text in the
// request bodies below ("$OWN_SIG(text)").
func withSignatures(body string) string {
	s := newSigner(nil)
	for {
		i := strings.Index(body, "$OWN_SIG(")
		if i < 0 {
			return body
		}
		j := strings.Index(body[i:], ")")
		text := body[i+len("$OWN_SIG(") : i+j]
		body = body[:i] + s.sign(text) + body[i+j+1:]
	}
}

// decodeBody runs the adapter's decoder and converter on a request body.
func decodeBody(t testing.TB, body string, counting bool) (*messagesRequest, *server.ChatRequest, error) {
	t.Helper()
	a := New(server.New(server.Config{Log: func(server.RequestLog) {}}), Options{})
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body))
	return a.decode(httptest.NewRecorder(), r, counting)
}

// coreView is what a golden file records of the core request.
type coreView struct {
	Messages          []chattemplate.Message
	Tools             []json.RawMessage `json:",omitempty"`
	ToolChoice        server.ToolChoiceMode
	ToolName          string `json:",omitempty"`
	ParallelToolCalls bool
	Thinking          *bool `json:",omitempty"`
	MaxTokens         int
	ClampMaxTokens    bool
	Stop              []string `json:",omitempty"`
	Temperature       float64
	TopP              float64
	TopK              int
	Format            bool
}

func view(r *server.ChatRequest) coreView {
	return coreView{Messages: r.Messages, Tools: r.Tools, ToolChoice: r.ToolChoice, ToolName: r.ToolName, ParallelToolCalls: r.ParallelToolCalls,
		Thinking: r.Thinking, MaxTokens: r.MaxTokens, ClampMaxTokens: r.ClampMaxTokens, Stop: r.Stop,
		Temperature: r.Sampling.Temperature, TopP: r.Sampling.TopP, TopK: r.Sampling.TopK, Format: r.Format != nil}
}

func loadQwen35(t *testing.T) server.Renderer {
	t.Helper()
	src, err := os.ReadFile(testfix.Shared(t, "templates/qwen35.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

const weatherTool = `{"name":"get_weather","description":"Current weather & <alerts> for a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}`

var renderCases = []struct {
	name string
	qwen bool // also render with the real Qwen3.5 template
	body string
}{
	{"plain", false, `{"model":"m","max_tokens":64,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}`},
	{"billing-header-dropped", true, `{"model":"m","max_tokens":64,"system":[
		{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=cli; cch=4f2a1;"},
		{"type":"text","text":"You are Claude Code, Anthropic's official CLI for Claude.","cache_control":{"type":"ephemeral"}},
		{"type":"text","text":"You help with software tasks.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>Be careful.</system-reminder>"},{"type":"text","text":"List the files.","cache_control":{"type":"ephemeral"}}]}],
		"metadata":{"user_id":"u1"}}`},
	{"tool-loop", true, `{"model":"m","max_tokens":512,"tools":[` + weatherTool + `],"thinking":{"type":"enabled","budget_tokens":2048},"messages":[
		{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"I should check the weather.","signature":"$OWN_SIG(I should check the weather.)"},{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris","unit":"c"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"sunny, 24 °C"},{"type":"text","text":"Answer in one line."}]}]}`},
	{"tool-result-blocks-error-and-order", false, `{"model":"m","max_tokens":64,"tools":[` + weatherTool + `],"messages":[
		{"role":"user","content":"Weather in Paris and Rome?"},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"toolu_b","name":"get_weather","input":{"city":"Rome"}}]},
		{"role":"user","content":[{"type":"text","text":"(text before the results)"},{"type":"tool_result","tool_use_id":"toolu_a","content":[{"type":"text","text":"rain"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}]},{"type":"tool_result","tool_use_id":"toolu_b","is_error":true,"content":"city not found"}]}]}`},
	{"foreign-unsigned-redacted-thinking", true, `{"model":"m","max_tokens":64,"tools":[` + weatherTool + `],"messages":[
		{"role":"user","content":"Weather?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"Claude's own thoughts.","signature":"EqQBCkYIBRgCKkBforeign"},{"type":"redacted_thinking","data":"EmwKAhgBEgy"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Oslo"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"snow"}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"Unsigned, from a converter.","signature":""},{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"city":"Bergen"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"rain"}]}]}`},
	{"edited-own-thinking-dropped", false, `{"model":"m","max_tokens":64,"messages":[
		{"role":"user","content":"Hi"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"Edited by the client.","signature":"$OWN_SIG(The original thought.)"},{"type":"text","text":"Hello."}]},
		{"role":"user","content":"Again"}]}`},
	{"tool-choice-any", false, `{"model":"m","max_tokens":64,"tools":[` + weatherTool + `],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"Oslo"}]}`},
	{"tool-choice-tool-no-parallel", false, `{"model":"m","max_tokens":64,"tools":[` + weatherTool + `],"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"Oslo"}]}`},
	{"tool-choice-none", false, `{"model":"m","max_tokens":64,"tools":[` + weatherTool + `],"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"Oslo"}]}`},
	{"thinking-disabled", false, `{"model":"m","max_tokens":64,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Hi"}]}`},
	{"thinking-adaptive-uses-the-default", false, `{"model":"m","max_tokens":64,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"Hi"}]}`},
	{"sampling-and-stops", false, `{"model":"m","max_tokens":99,"temperature":0.7,"top_p":0.9,"top_k":20,"stop_sequences":["\n\nHuman:","END"],"messages":[{"role":"user","content":"Hi"}]}`},
	{"server-tools-skipped", false, `{"model":"m","max_tokens":64,"tools":[{"type":"bash_20250124","name":"bash"},{"type":"web_search_20250305","name":"web_search","max_uses":3},{"type":"custom","name":"read","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},{"name":"noschema"}],"messages":[{"role":"user","content":"Hi"}]}`},
	{"output-format", false, `{"model":"m","max_tokens":64,"output_format":{"type":"json_schema","schema":{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}},"messages":[{"role":"user","content":"Hi"}]}`},
	{"output-config-format", false, `{"model":"m","max_tokens":64,"output_config":{"effort":"high","format":{"type":"json_schema","schema":{"type":"array","items":{"type":"integer"}}}},"messages":[{"role":"user","content":"Hi"}]}`},
}

// Each request, as the core receives it and as the template renders it,
// against a golden file (go test -update rewrites them).
func TestRequestToCoreToPrompt(t *testing.T) {
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, servertest.Renderer{})
	var qwen *server.Server
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			_, creq, err := decodeBody(t, withSignatures(c.body), false)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			b.WriteString("== core request\n")
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			enc.Encode(view(creq))
			b.WriteString("== prompt (servertest.Renderer)\n")
			prompt, err := s.ApplyTemplate(creq)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(prompt)
			if c.qwen {
				if qwen == nil {
					// Load first: without the fixtures loadQwen35 skips this
					// subtest, and a server left without an engine would fail
					// the next one instead of skipping it.
					r := loadQwen35(t)
					qwen = server.New(server.Config{Log: func(server.RequestLog) {}})
					qwen.SetEngine(&servertest.Engine{}, r)
				}
				prompt, err := qwen.ApplyTemplate(creq)
				if err != nil {
					t.Fatal(err)
				}
				b.WriteString("\n== prompt (qwen35.jinja)\n" + prompt)
			}
			golden(t, filepath.Join("testdata", "render", c.name+".golden"), b.String())
		})
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs (go test -update rewrites it after a deliberate change):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// Requests the adapter refuses, each with the field named.
func TestInvalidRequestsNameTheField(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"max_tokens missing", `{"messages":[{"role":"user","content":"x"}]}`, "max_tokens: field required"},
		{"max_tokens zero", `{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens must be at least 1"},
		{"max_tokens a string", `{"max_tokens":"9","messages":[{"role":"user","content":"x"}]}`, `"max_tokens"`},
		{"no messages", `{"max_tokens":9,"messages":[]}`, "send at least one message"},
		{"system role in messages", `{"max_tokens":9,"messages":[{"role":"system","content":"x"}]}`, `messages[0].role "system"`},
		{"content missing", `{"max_tokens":9,"messages":[{"role":"user"}]}`, "messages[0].content is missing"},
		{"content a number", `{"max_tokens":9,"messages":[{"role":"user","content":5}]}`, "messages[0].content: expected a string or an array"},
		{"image from the user", `{"max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "messages[0].content[0] is an image block"},
		{"unknown user block", `{"max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_use","name":"f"}]}]}`, `messages[0].content[0] has type "tool_use"`},
		{"unknown assistant block", `{"max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_result"}]}]}`, `messages[1].content[0] has type "tool_result"`},
		{"tool_use input a string not JSON", `{"max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{not json"}]}]}`, "messages[1].content[0].input is not a JSON object"},
		{"tool_use input an array", `{"max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t","name":"f","input":[1]}]}]}`, "messages[1].content[1].input is not a JSON object (it is a JSON array)"},
		{"tool_use input a string", `{"max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"\"x\""}]}]}`, "messages[1].content[0].input is not a JSON object"},
		{"tool_use without name", `{"max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t"}]}]}`, "messages[1].content[0].name is missing"},
		{"system block not text", `{"max_tokens":9,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`, `system[0] has type "image"`},
		{"tool without name", `{"max_tokens":9,"tools":[{"input_schema":{}}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].name is missing"},
		{"tool schema not an object", `{"max_tokens":9,"tools":[{"name":"f","input_schema":[1]}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].input_schema must be a JSON Schema object"},
		{"tool_choice tool without name", `{"max_tokens":9,"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"x"}]}`, "needs the tool's name"},
		{"tool_choice unknown", `{"max_tokens":9,"tool_choice":{"type":"required"},"messages":[{"role":"user","content":"x"}]}`, `tool_choice.type "required"`},
		{"thinking unknown", `{"max_tokens":9,"thinking":{"type":"on"},"messages":[{"role":"user","content":"x"}]}`, `thinking.type "on"`},
		{"temperature out of range", `{"max_tokens":9,"temperature":-1,"messages":[{"role":"user","content":"x"}]}`, "temperature"},
		{"top_k below -1", `{"max_tokens":9,"top_k":-5,"messages":[{"role":"user","content":"x"}]}`, "top_k -5 must be ≥ 0"},
		{"too many stop sequences", `{"max_tokens":9,"stop_sequences":["1","2","3","4","5","6","7","8","9","10","11","12","13","14","15","16","17"],"messages":[{"role":"user","content":"x"}]}`, "at most 16"},
		{"output_format type", `{"max_tokens":9,"output_format":{"type":"json_object"},"messages":[{"role":"user","content":"x"}]}`, `output_format.type "json_object"`},
		{"output_format schema missing", `{"max_tokens":9,"output_format":{"type":"json_schema"},"messages":[{"role":"user","content":"x"}]}`, "output_format.schema is missing"},
		{"output_format unsupported keyword", `{"max_tokens":9,"output_format":{"type":"json_schema","schema":{"type":"array","uniqueItems":true}},"messages":[{"role":"user","content":"x"}]}`, "uniqueItems"},
		{"both output formats", `{"max_tokens":9,"output_format":{"type":"json_schema","schema":{}},"output_config":{"format":{"type":"json_schema","schema":{}}},"messages":[{"role":"user","content":"x"}]}`, "not both"},
		{"effort unknown", `{"max_tokens":9,"output_config":{"effort":"xhigh"},"messages":[{"role":"user","content":"x"}]}`, `output_config.effort "xhigh"`},
		{"malformed JSON", `{"max_tokens":9,`, "malformed JSON"},
		{"two JSON values", `{"max_tokens":9} {}`, "more than one JSON value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := decodeBody(t, c.body, false)
			if err == nil {
				t.Fatal("accepted")
			}
			status, d := classify(err)
			if status != 400 || d.Type != "invalid_request_error" || !strings.Contains(d.Message, c.want) {
				t.Fatalf("%d %s %q, want 400 invalid_request_error containing %q", status, d.Type, d.Message, c.want)
			}
		})
	}
}

func TestSignatureRecognisesOnlyItsOwnUnchangedThinking(t *testing.T) {
	s, other := newSigner(nil), newSigner([]byte("another key"))
	sig := s.sign("a thought")
	cases := []struct {
		name, text, sig string
		own             bool
	}{
		{"own", "a thought", sig, true},
		{"edited text", "a thought!", sig, false},
		{"another key", "a thought", other.sign("a thought"), false},
		{"no prefix", "a thought", strings.TrimPrefix(sig, signaturePrefix), false},
		{"not base64", "a thought", signaturePrefix + "%%%", false},
		{"empty", "a thought", "", false},
	}
	for _, c := range cases {
		if got := s.own(c.text, c.sig); got != c.own {
			t.Errorf("%s: own %v, want %v", c.name, got, c.own)
		}
	}
	if s.sign("x") != newSigner(nil).sign("x") {
		t.Fatal("the default key must give the same signature in every process")
	}
}

// With a Qwen3.8 template output_config.effort reaches reasoning_effort
// (high and max → xhigh), thinking.type still switches thinking, and an
// earlier turn's own thinking block is rendered back (preserve_thinking on
// by default).
func TestEffortQwen38(t *testing.T) {
	tmpl, err := chattemplate.Load(filepath.Join("..", "..", "chattemplate", "testdata", "models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	s.SetEngine(&servertest.Engine{}, tmpl)
	const (
		xhigh = "Reasoning effort is set to xhigh. Please think carefully and thoroughly before you answer.\n\n"
		low   = "Reasoning effort is set to low. Keep your thinking brief and answer directly.\n\n"
		msgs  = `"system":"S","messages":[{"role":"user","content":"Q1"},{"role":"assistant","content":[{"type":"thinking","thinking":"R1","signature":"$OWN_SIG(R1)"},{"type":"text","text":"A1"}]},{"role":"user","content":"Q2"}]`
	)
	for _, c := range []struct {
		body, head string
		think      bool
	}{
		{`{"max_tokens":9,` + msgs + `}`, xhigh, true},
		{`{"max_tokens":9,"output_config":{"effort":"low"},` + msgs + `}`, low, true},
		{`{"max_tokens":9,"output_config":{"effort":"medium"},` + msgs + `}`, "", true},
		{`{"max_tokens":9,"output_config":{"effort":"high"},` + msgs + `}`, xhigh, true},
		{`{"max_tokens":9,"output_config":{"effort":"max"},"thinking":{"type":"enabled","budget_tokens":1024},` + msgs + `}`, xhigh, true},
		{`{"max_tokens":9,"output_config":{"effort":"low"},"thinking":{"type":"disabled"},` + msgs + `}`, "", false},
	} {
		_, creq, err := decodeBody(t, withSignatures(c.body), false)
		if err != nil {
			t.Fatal(err)
		}
		prompt, err := s.ApplyTemplate(creq)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(prompt, "<|im_start|>system\n"+c.head+"S<|im_end|>\n") {
			t.Errorf("%s: prompt %q, want the system turn to start %q", c.body, prompt, c.head)
		}
		if !strings.Contains(prompt, "<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>") {
			t.Errorf("%s: the earlier thinking is not rendered back: %q", c.body, prompt)
		}
		if open := strings.HasSuffix(prompt, "<think>\n") && !strings.HasSuffix(prompt, "</think>\n\n"); open != c.think {
			t.Errorf("%s: thinking %v, want %v", c.body, open, c.think)
		}
	}
}
