package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadPicksTheTemplateAsTransformersDoes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    string // rendered "x" of {{ x }}-free templates
		origin  string
		wantErr error
	}{
		{"jinja file wins", map[string]string{jinjaFile: "J", tokenizerConfigFile: `{"chat_template": "C"}`}, "J", jinjaFile, nil},
		{"jinja file alone", map[string]string{jinjaFile: "J"}, "J", jinjaFile, nil},
		{"config string", map[string]string{tokenizerConfigFile: `{"chat_template": "C"}`}, "C", tokenizerConfigFile, nil},
		{"config named list", map[string]string{tokenizerConfigFile: `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`}, "D", tokenizerConfigFile, nil},
		{"config null", map[string]string{tokenizerConfigFile: `{"chat_template": null}`}, "", "", ErrNoTemplate},
		{"nothing", map[string]string{}, "", "", ErrNoTemplate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			tmpl, err := Load(dir)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Load = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tmpl.Source() != tc.want || filepath.Base(tmpl.Origin()) != tc.origin {
				t.Fatalf("source %q from %q, want %q from %q", tmpl.Source(), tmpl.Origin(), tc.want, tc.origin)
			}
		})
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"config not JSON":          {tokenizerConfigFile: `{"chat_template": `},
		"config template a number": {tokenizerConfigFile: `{"chat_template": 3}`},
		"named list no default":    {tokenizerConfigFile: `{"chat_template": [{"name": "x", "template": "T"}]}`},
		"template does not parse":  {jinjaFile: "{% if %}"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(writeFiles(t, files)); err == nil || errors.Is(err, ErrNoTemplate) {
				t.Fatalf("Load = %v, want a parse error naming the file", err)
			}
		})
	}
}

func TestSpecialTokenVariables(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		jinjaFile:           "{{ bos_token is defined }}|{{ eos_token }}|{{ pad_token }}|{{ additional_special_tokens|join(',') }}|{{ unk_token is defined }}",
		tokenizerConfigFile: `{"bos_token": null, "eos_token": {"content": "<E>", "lstrip": false}, "pad_token": "<P>", "additional_special_tokens": ["<a>", {"content": "<b>"}]}`,
	})
	tmpl, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "False|<E>|<P>|<a>,<b>|False"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// A kwarg overrides a special token, as in apply_chat_template.
	got, _ = tmpl.Render(Input{Kwargs: map[string]any{"eos_token": "X"}})
	if !strings.Contains(got, "|X|") {
		t.Fatalf("kwarg did not override eos_token: %q", got)
	}
}

func TestLoadFileOverride(t *testing.T) {
	dir := writeFiles(t, map[string]string{jinjaFile: "install", tokenizerConfigFile: `{"eos_token": "<E>"}`, "mine.jinja": "mine {{ eos_token }}"})
	tmpl, err := LoadFile(filepath.Join(dir, "mine.jinja"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tmpl.Render(Input{}); got != "mine <E>" {
		t.Fatalf("got %q", got)
	}
}

func TestSHA256IsTheFixturesHash(t *testing.T) {
	tmpl, err := Load("testdata/models/qwen36")
	if err != nil {
		t.Fatal(err)
	}
	// From /work/shared/fixtures/templates/README.md (sha256sum of the file).
	if got := tmpl.SHA256(); got != "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259" {
		t.Fatalf("SHA256 = %s", got)
	}
}

// TestKeyOrderSurvives is acceptance item 4 of the server reference: tools
// and tool-call arguments keep the client's key order, whatever Go's maps do.
func TestKeyOrderSurvives(t *testing.T) {
	tmpl, err := Parse("{% for t in tools %}{{ t|tojson }}{% endfor %}|{% for k, v in messages[0].tool_calls[0].function.arguments|items %}{{ k }},{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := FromOpenAIMessages(json.RawMessage(`[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"w","arguments":"{\"path\":\"p\",\"content\":\"c\",\"a\":1}"}}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	tool := json.RawMessage(`{"type":"function","function":{"name":"w","parameters":{"properties":{"path":{"type":"string"},"content":{"type":"string"}}}}}`)
	got, err := tmpl.Render(Input{Messages: msgs, Tools: []json.RawMessage{tool}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type": "function", "function": {"name": "w", "parameters": {"properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}|path,content,a,`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestRenderErrors(t *testing.T) {
	tmpl, err := Parse("{{ raise_exception('boom: ' ~ x) }}")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   Input
		want string
	}{
		{"raise_exception message", Input{Kwargs: map[string]any{"x": json.RawMessage(`"y"`)}}, "boom: y"},
		{"reserved kwarg", Input{Kwargs: map[string]any{"messages": "x"}}, `template variable "messages" cannot be set by chat_template_kwargs`},
		{"bad tool JSON", Input{Tools: []json.RawMessage{json.RawMessage(`{"a":`)}}, "tools[0]: invalid JSON"},
		{"trailing data in tool", Input{Tools: []json.RawMessage{json.RawMessage(`{} {}`)}}, "tools[0]: invalid JSON: data after the value"},
		{"bad arguments", Input{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{x`)}}}}}, "messages[0]: tool_calls[0]: arguments: invalid JSON"},
		{"too deep", Input{Tools: []json.RawMessage{json.RawMessage(strings.Repeat("[", 2000) + strings.Repeat("]", 2000))}}, "nested deeper than"},
		{"unsupported kwarg type", Input{Kwargs: map[string]any{"x": struct{}{}}}, "unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tmpl.Render(tc.in)
			var re *RenderError
			if !errors.As(err, &re) || !strings.Contains(re.Msg, tc.want) {
				t.Fatalf("Render error %v, want a RenderError containing %q", err, tc.want)
			}
		})
	}
}

func TestKwargValues(t *testing.T) {
	tmpl, err := Parse("{{ a }} {{ b }} {{ c|tojson }} {{ d }} {{ e is false }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{Kwargs: map[string]any{
		"a": float64(2), "b": 2.5, "c": json.RawMessage(`{"z":1,"a":[true,null]}`), "d": json.Number("7"), "e": false,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `2 2.5 {"z": 1, "a": [true, null]} 7 True`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestFromOpenAIMessages(t *testing.T) {
	msgs, err := FromOpenAIMessages(json.RawMessage(`[
		{"role":"developer","content":"d"},
		{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"u"},
		{"role":"assistant","content":null,"reasoning":"r","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"b\":1,\"a\":2}"}},
			{"id":"c2","type":"function","function":{"name":"g","arguments":{"x":true}}},
			{"id":"c3","type":"function","function":{"name":"h","arguments":"[1]"}},
			{"id":"c4","type":"function","function":{"name":"i","arguments":""}}]},
		{"role":"assistant","reasoning_content":"rc","reasoning":"ignored"},
		{"role":"tool","content":"out","tool_call_id":"c1"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].Role != "developer" || msgs[0].Content != "d" {
		t.Errorf("developer: %+v", msgs[0])
	}
	if len(msgs[1].Parts) != 2 || msgs[1].Parts[1].Text != "b" || msgs[1].Name != "u" {
		t.Errorf("parts: %+v", msgs[1])
	}
	a := msgs[2]
	if !a.ContentNull || a.ReasoningContent == nil || *a.ReasoningContent != "r" || len(a.ToolCalls) != 4 {
		t.Fatalf("assistant: %+v", a)
	}
	for i, want := range []string{`{"b":1,"a":2}`, `{"x":true}`, `"[1]"`, ``} {
		if got := string(a.ToolCalls[i].Arguments); got != want {
			t.Errorf("tool_calls[%d].arguments = %s, want %s", i, got, want)
		}
	}
	if msgs[3].ReasoningContent == nil || *msgs[3].ReasoningContent != "rc" || !msgs[3].ContentNull {
		t.Errorf("reasoning_content must win over reasoning: %+v", msgs[3])
	}
	if msgs[4].ToolCallID != "c1" {
		t.Errorf("tool: %+v", msgs[4])
	}
}

func TestFromOpenAIMessagesErrors(t *testing.T) {
	for _, tc := range []struct{ in, field string }{
		{`{}`, "messages"},
		{`null`, "messages"},
		{`[1]`, "messages[0]"},
		{`[{"content":"x"}]`, "messages[0].role"},
		{`[{"role":3}]`, "messages[0].role"},
		{`[{"role":"user","content":3}]`, "messages[0].content"},
		{`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`, "messages[0].content[0].type"},
		{`[{"role":"user","content":[{"type":"text"}]}]`, "messages[0].content[0].text"},
		{`[{"role":"assistant","tool_calls":{}}]`, "messages[0].tool_calls"},
		{`[{"role":"tool","tool_call_id":5}]`, "messages[0].tool_call_id"},
	} {
		_, err := FromOpenAIMessages(json.RawMessage(tc.in))
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: error %v, want an InputError for %s", tc.in, err, tc.field)
		}
	}
}

// TestRaiseInsideMacro: the template's raise_exception is found from inside
// a macro too (the Qwen templates raise from render_content).
func TestRaiseInsideMacro(t *testing.T) {
	tmpl, err := Parse("{% macro m(x) %}{{ raise_exception('in macro ' ~ x) }}{% endmacro %}{{ m(1)|trim }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{})
	var re *RenderError
	if !errors.As(err, &re) || re.Msg != "in macro 1" {
		t.Fatalf("error %v", err)
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl, err := Parse("{{ strftime_now('%Y') }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(Input{})
	if err != nil || len(got) != 4 || got < "2026" {
		t.Fatalf("strftime_now('%%Y') = %q, %v", got, err)
	}
}
