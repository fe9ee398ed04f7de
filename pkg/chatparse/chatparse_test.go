package chatparse

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var testTools = []Tool{
	{Name: "write_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},"append":{"type":"boolean"},"mode":{"type":["integer","null"]}},"required":["path","content"]}`)},
	{Name: "read_file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"offset":{"type":"integer"},"limit":{"type":"number"}}}`)},
	{Name: "configure", Parameters: json.RawMessage(`{"type":"object","properties":{"opts":{"type":"object"},"list":{"type":"array"},"flag":{"type":"boolean"},"maybe":{"anyOf":[{"type":"string"},{"type":"null"}]},"either":{"anyOf":[{"type":"string"},{"type":"object"}]},"color":{"enum":["red","blue"]}}}`)},
	{Name: "noargs", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
}

// call builds the raw text of a call the way the templates render one.
func call(name string, params ...string) string {
	var b strings.Builder
	b.WriteString("<tool_call>\n<function=" + name + ">\n")
	for i := 0; i+1 < len(params); i += 2 {
		b.WriteString("<parameter=" + params[i] + ">\n" + params[i+1] + "\n</parameter>\n")
	}
	b.WriteString("</function>\n</tool_call>")
	return b.String()
}

type parseCase struct {
	name        string
	inReasoning bool
	noTools     bool
	noCalls     bool
	in          string
	want        Result
}

func tc(name, args string) ToolCall { return ToolCall{Name: name, Arguments: args} }

var parseCases = []parseCase{
	{name: "plain content", in: "Hello, world.", want: Result{Content: "Hello, world."}},
	{name: "empty output", in: "", want: Result{}},
	{name: "empty output in reasoning", inReasoning: true, in: "", want: Result{}},
	{name: "reasoning then answer", inReasoning: true, in: "Think.\n</think>\n\nAnswer.", want: Result{Reasoning: "Think.\n", Content: "Answer."}},
	{name: "reasoning never closed is all reasoning", inReasoning: true, in: "Still thinking about <b> and 1 < 2", want: Result{Reasoning: "Still thinking about <b> and 1 < 2"}},
	{name: "reasoning cut inside </think>", inReasoning: true, in: "Hmm </thi", want: Result{Reasoning: "Hmm </thi"}},
	{name: "think tag at start when not in reasoning", in: "<think>\nplan\n</think>\n\nDone", want: Result{Reasoning: "plan\n", Content: "Done"}},
	{name: "think tag after whitespace", in: "\n\n<think>x</think>y", want: Result{Reasoning: "x", Content: "y"}},
	{name: "think tag later is content", in: "a <think>b</think>", want: Result{Content: "a <think>b</think>"}},
	{name: "thinking off empty think is stripped newlines", in: "\n\nAnswer", want: Result{Content: "Answer"}},
	{name: "single call", in: call("read_file", "path", "a.txt"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "text before a call", in: "Let me look.\n\n" + call("read_file", "path", "a.txt"), want: Result{Content: "Let me look.\n\n", ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "reasoning then call", inReasoning: true, in: "Need file.\n</think>\n\n" + call("read_file", "path", "a"), want: Result{Reasoning: "Need file.\n", ToolCalls: []ToolCall{tc("read_file", `{"path":"a"}`)}}},
	{name: "call without </think> ends reasoning", inReasoning: true, in: "Need file.\n\n" + call("read_file", "path", "a"), want: Result{Reasoning: "Need file.\n\n", ToolCalls: []ToolCall{tc("read_file", `{"path":"a"}`)}}},
	{name: "<tool_call> mentioned in reasoning", inReasoning: true, in: "I should emit <tool_call> tags later.\n</think>\n\nOK", want: Result{Reasoning: "I should emit <tool_call> tags later.\n", Content: "OK"}},
	{name: "<tool_call> mentioned in content", in: "Use the <tool_call> tag.", want: Result{Content: "Use the <tool_call> tag."}},
	{name: "two calls", in: call("read_file", "path", "a") + "\n" + call("read_file", "path", "b"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a"}`), tc("read_file", `{"path":"b"}`)}}},
	{name: "three calls no separator", in: call("noargs") + call("noargs") + call("read_file", "path", "c"), want: Result{ToolCalls: []ToolCall{tc("noargs", `{}`), tc("noargs", `{}`), tc("read_file", `{"path":"c"}`)}}},
	{name: "no parameters", in: call("noargs"), want: Result{ToolCalls: []ToolCall{tc("noargs", `{}`)}}},
	{name: "multi-line code value", in: call("write_file", "path", "m.go", "content", "package main\n\nfunc main() {\n\tif a < b {\n\t\tprintln(\"x\")\n\t}\n}\n"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"m.go","content":"package main\n\nfunc main() {\n\tif a < b {\n\t\tprintln(\"x\")\n\t}\n}\n"}`)}}},
	{name: "value keeps inner blank lines and spaces", in: call("write_file", "path", " p ", "content", "\n\nx\n\n"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":" p ","content":"\n\nx\n\n"}`)}}},
	{name: "string param stays verbatim", in: call("write_file", "path", "True", "content", `{"a": 1}`), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"True","content":"{\"a\": 1}"}`)}}},
	{name: "python True and None", in: call("write_file", "path", "p", "content", "c", "append", "True", "mode", "None"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"p","content":"c","append":true,"mode":null}`)}}},
	{name: "json true and null", in: call("write_file", "path", "p", "content", "c", "append", "false", "mode", "null"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"p","content":"c","append":false,"mode":null}`)}}},
	{name: "integer and integral float", in: call("read_file", "path", "p", "offset", "10.0", "limit", "2.5"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"p","offset":10,"limit":2.5}`)}}},
	{name: "number stays as written", in: call("read_file", "path", "p", "limit", "1e3"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"p","limit":1e3}`)}}},
	{name: "un-coercible integer stays string", in: call("read_file", "path", "p", "offset", "ten"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"p","offset":"ten"}`)}}},
	{name: "json object and array", in: call("configure", "opts", `{"b": 1, "a": [true, null]}`, "list", `[1, "x"]`), want: Result{ToolCalls: []ToolCall{tc("configure", `{"opts":{"b":1,"a":[true,null]},"list":[1,"x"]}`)}}},
	{name: "python dict and tuple", in: call("configure", "opts", `{'k': 'it\'s', 'n': None, 1: True}`, "list", `(1, 'a', [False])`), want: Result{ToolCalls: []ToolCall{tc("configure", `{"opts":{"k":"it's","n":null,"1":true},"list":[1,"a",[false]]}`)}}},
	{name: "boolean spelled TRUE", in: call("configure", "flag", "TRUE"), want: Result{ToolCalls: []ToolCall{tc("configure", `{"flag":true}`)}}},
	{name: "nullable string null", in: call("configure", "maybe", "None"), want: Result{ToolCalls: []ToolCall{tc("configure", `{"maybe":null}`)}}},
	{name: "nullable string text", in: call("configure", "maybe", "none of these"), want: Result{ToolCalls: []ToolCall{tc("configure", `{"maybe":"none of these"}`)}}},
	{name: "anyOf string object given object", in: call("configure", "either", `{"x": 1}`), want: Result{ToolCalls: []ToolCall{tc("configure", `{"either":{"x":1}}`)}}},
	{name: "enum is a string", in: call("configure", "color", "red"), want: Result{ToolCalls: []ToolCall{tc("configure", `{"color":"red"}`)}}},
	{name: "unknown param JSON", in: call("read_file", "extra", "42", "path", "p"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"extra":42,"path":"p"}`)}}},
	{name: "unknown param text", in: call("read_file", "extra", "hello there", "path", "p"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"extra":"hello there","path":"p"}`)}}},
	{name: "unknown param after a value stays in it", in: call("read_file", "path", "p", "extra", "1"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"p\n</parameter>\n<parameter=extra>\n1"}`)}}},
	{name: "cut inside </parameter>", in: "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</param", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "cut inside </function>", in: "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</func", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "unknown tool best effort", in: call("mystery", "a", "1", "b", "[1,2]", "c", "text", "d", "True"), want: Result{ToolCalls: []ToolCall{tc("mystery", `{"a":1,"b":[1,2],"c":"text","d":"True"}`)}}},
	{name: "no tools at all", noTools: true, in: call("read_file", "path", "a.txt", "offset", "3"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt","offset":3}`)}}},
	{name: "value with literal </parameter>", in: call("write_file", "path", "x.md", "content", "Close with </parameter> then text"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"x.md","content":"Close with </parameter> then text"}`)}}},
	{name: "value with </parameter> on its own line", in: call("write_file", "path", "x.md", "content", "a\n</parameter>\nb"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"x.md","content":"a\n</parameter>\nb"}`)}}},
	{name: "value with </function> and </tool_call>", in: call("write_file", "path", "x", "content", "</function>\n</tool_call>\nmore"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"x","content":"</function>\n</tool_call>\nmore"}`)}}},
	{name: "value with a nested example call", in: call("write_file", "path", "doc.md", "content", "Format:\n"+call("example", "p1", "v1", "p2", "v2")+"\nEnd."), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"doc.md","content":"Format:\n<tool_call>\n<function=example>\n<parameter=p1>\nv1\n</parameter>\n<parameter=p2>\nv2\n</parameter>\n</function>\n</tool_call>\nEnd."}`)}}},
	{name: "value mentioning a used parameter", in: call("write_file", "path", "x", "content", "a\n<parameter=path>\nb"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"x","content":"a\n<parameter=path>\nb"}`)}}},
	{name: "missing </parameter> before next parameter", in: "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n<parameter=content>\nhi\n</parameter>\n</function>\n</tool_call>", want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"a.txt","content":"hi"}`)}}},
	{name: "missing </parameter> before </function>", in: "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</function>\n</tool_call>", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "missing </tool_call> at end", in: "<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</function>", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "cut inside a value", in: "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</parameter>\n<parameter=content>\nhalf a li", want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"a.txt","content":"half a li"}`)}}},
	{name: "cut after the value's newline", in: "<tool_call>\n<function=write_file>\n<parameter=content>\nline\n", want: Result{ToolCalls: []ToolCall{tc("write_file", `{"content":"line"}`)}}},
	{name: "cut inside a parameter tag", in: "<tool_call>\n<function=read_file>\n<parameter=path>\na\n</parameter>\n<parame", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a"}`)}}},
	{name: "cut inside the function tag", in: "Hi <tool_call>\n<function=read_fi", want: Result{Content: "Hi <tool_call>\n<function=read_fi"}},
	{name: "cut after <tool_call>", in: "Hi <tool_call>", want: Result{Content: "Hi <tool_call>"}},
	{name: "phantom name is content", in: "<tool_call>\n<function={{ tool.name }}>\n</function>\n</tool_call>", want: Result{Content: "<tool_call>\n<function={{ tool.name }}>\n</function>\n</tool_call>"}},
	{name: "name with a space is content", in: "<tool_call>\n<function=read file>\n</function>\n</tool_call>", want: Result{Content: "<tool_call>\n<function=read file>\n</function>\n</tool_call>"}},
	{name: "hermes JSON is content", in: "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", want: Result{Content: "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"}},
	{name: "repeated parameter stays in the value", in: call("read_file", "path", "a", "path", "b"), want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a\n</parameter>\n<parameter=path>\nb"}`)}}},
	{name: "tool without properties takes any names", in: call("noargs", "x", "1", "y", "two"), want: Result{ToolCalls: []ToolCall{tc("noargs", `{"x":1,"y":"two"}`)}}},
	{name: "text after a call is content", in: call("noargs") + "\n\nDone.", want: Result{Content: "Done.", ToolCalls: []ToolCall{tc("noargs", `{}`)}}},
	{name: "garbage inside function dropped", in: "<tool_call>\n<function=read_file>\noops\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a"}`)}}},
	{name: "non-ASCII everywhere", inReasoning: true, in: "想一想 🤔\n</think>\n\n好的：" + call("write_file", "path", "文件.txt", "content", "内容 😀 \"q\" \\ <tag>"), want: Result{Reasoning: "想一想 🤔\n", Content: "好的：", ToolCalls: []ToolCall{tc("write_file", `{"path":"文件.txt","content":"内容 😀 \"q\" \\ <tag>"}`)}}},
	{name: "control characters escaped", in: call("write_file", "path", "p", "content", "a\tb\x01c\r"), want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":"p","content":"a\tb\u0001c\r"}`)}}},
	{name: "empty string value", in: "<tool_call>\n<function=write_file>\n<parameter=path>\n</parameter>\n</function>\n</tool_call>", want: Result{ToolCalls: []ToolCall{tc("write_file", `{"path":""}`)}}},
	{name: "value without framing newlines", in: "<tool_call><function=read_file><parameter=path>a.txt</parameter></function></tool_call>", want: Result{ToolCalls: []ToolCall{tc("read_file", `{"path":"a.txt"}`)}}},
	{name: "NoToolCalls keeps markup as text", noCalls: true, in: "Sure. " + call("noargs"), want: Result{Content: "Sure. " + call("noargs")}},
	{name: "NoToolCalls in reasoning", noCalls: true, inReasoning: true, in: "r " + call("noargs") + "</think>a", want: Result{Reasoning: "r " + call("noargs"), Content: "a"}},
	{name: "less-than signs in content", in: "if a<b and b <= c then <x", want: Result{Content: "if a<b and b <= c then <x"}},
}

func parseWhole(c parseCase, in string) (Result, []Event) {
	p := New(c.options())
	ev := append(p.Push(in), p.Finish()...)
	return p.Result(), ev
}

func (c parseCase) options() Options {
	n := 0
	opt := Options{InReasoning: c.inReasoning, NoToolCalls: c.noCalls, NewID: func() string { n++; return fmt.Sprintf("call_%d", n) }}
	if !c.noTools {
		opt.Tools = testTools
	}
	return opt
}

func parseChunks(c parseCase, chunks []string) (Result, []Event) {
	p := New(c.options())
	var ev []Event
	for _, ch := range chunks {
		ev = append(ev, p.Push(ch)...)
	}
	ev = append(ev, p.Finish()...)
	return p.Result(), ev
}

func clearIDs(r Result) Result {
	calls := make([]ToolCall, len(r.ToolCalls))
	for i, c := range r.ToolCalls {
		c.ID = ""
		calls[i] = c
	}
	if len(calls) == 0 {
		calls = nil
	}
	r.ToolCalls = calls
	return r
}

func TestParse(t *testing.T) {
	if len(parseCases) < 40 {
		t.Fatalf("only %d cases", len(parseCases))
	}
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			got, ev := parseWhole(c, c.in)
			if g := clearIDs(got); !reflect.DeepEqual(g, c.want) {
				t.Fatalf("got  %#v\nwant %#v", g, c.want)
			}
			checkInvariants(t, got, ev)
		})
	}
}

// checkInvariants: the events rebuild the result, every call's arguments
// are one JSON object, and ids are set.
func checkInvariants(t *testing.T, r Result, ev []Event) {
	t.Helper()
	var rebuilt Result
	for _, e := range ev {
		switch e.Kind {
		case Content:
			rebuilt.Content += e.Text
		case Reasoning:
			rebuilt.Reasoning += e.Text
		case ToolCallStart:
			if e.Index != len(rebuilt.ToolCalls) || !strings.HasPrefix(e.ID, "call_") || e.Name == "" {
				t.Fatalf("bad ToolCallStart %+v", e)
			}
			rebuilt.ToolCalls = append(rebuilt.ToolCalls, ToolCall{ID: e.ID, Name: e.Name})
		case ToolCallArgs:
			if e.Index != len(rebuilt.ToolCalls)-1 {
				t.Fatalf("args for call %d while call %d is open", e.Index, len(rebuilt.ToolCalls)-1)
			}
			rebuilt.ToolCalls[e.Index].Arguments += e.Text
		}
	}
	if !reflect.DeepEqual(rebuilt, r) {
		t.Fatalf("events rebuild %#v\nbut Result is %#v", rebuilt, r)
	}
	for _, c := range r.ToolCalls {
		var obj map[string]any
		if err := json.Unmarshal([]byte(c.Arguments), &obj); err != nil {
			t.Fatalf("arguments %q are not a JSON object: %v", c.Arguments, err)
		}
	}
}

// TestStreamingSplits is the streaming invariant: every way of cutting the
// text (each rune apart, every cut into two, random chunks) parses to the
// same result as the whole text.
func TestStreamingSplits(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			want, _ := parseWhole(c, c.in)
			check := func(how string, chunks []string) {
				got, ev := parseChunks(c, chunks)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s %q:\n got  %#v\n want %#v", how, chunks, got, want)
				}
				checkInvariants(t, got, ev)
			}
			var runes []string
			for _, r := range c.in {
				runes = append(runes, string(r))
			}
			check("rune by rune", runes)
			for i := 0; i <= len(c.in); i++ {
				check("cut in two", []string{c.in[:i], c.in[i:]})
			}
			for n := 0; n < 20; n++ {
				check("random chunks", randomChunks(rng, c.in))
			}
		})
	}
}

// randomChunks cuts s at random byte offsets (inside characters too: Push
// holds an incomplete UTF-8 sequence back).
func randomChunks(rng *rand.Rand, s string) []string {
	var out []string
	for len(s) > 0 {
		n := 1 + rng.Intn(8)
		if n > len(s) {
			n = len(s)
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// TestHoldsBackOnlyMarkup: text that cannot start markup is emitted at once.
func TestHoldsBackOnlyMarkup(t *testing.T) {
	for _, tc := range []struct {
		inReasoning bool
		push, want  string
	}{
		{false, "Hello <tool_ca", "Hello "},
		{false, "Hello <b>", "Hello <b>"},
		{false, "a < b", "a < b"},
		{true, "think </thi", "think "},
		{true, "think <tool_call>\n<func", "think "},
		{true, "think <tool_call> is a tag", "think <tool_call> is a tag"},
	} {
		p := New(Options{InReasoning: tc.inReasoning})
		var got string
		for _, e := range p.Push(tc.push) {
			got += e.Text
		}
		if got != tc.want {
			t.Errorf("Push(%q) emitted %q, want %q", tc.push, got, tc.want)
		}
	}
	// A string value streams as it arrives, less a newline that may frame it.
	p := New(Options{Tools: testTools})
	p.Push("<tool_call>\n<function=write_file>\n<parameter=content>\nline one\n")
	if got := p.Result().ToolCalls[0].Arguments; got != `{"content":"line one` {
		t.Errorf("streamed arguments %q", got)
	}
}

func TestDefaultIDs(t *testing.T) {
	p := New(Options{})
	p.Push(call("a") + call("b"))
	p.Finish()
	r := p.Result()
	if len(r.ToolCalls) != 2 || r.ToolCalls[0].ID == r.ToolCalls[1].ID || !strings.HasPrefix(r.ToolCalls[0].ID, "call_") {
		t.Fatalf("ids %+v", r.ToolCalls)
	}
}

func TestPythonLiteral(t *testing.T) {
	for in, want := range map[string]string{
		`None`: `null`, `True`: `true`, `-3`: `-3`, `2.0`: `2.0`, `1_000`: `1000`, `1e5`: `100000.0`,
		`'a"b'`: `"a\"b"`, `"x\ty"`: `"x\ty"`, `'\u00e9\x41'`: `"éA"`,
		`[1, (2, 3), {'a': [None]}]`: `[1,[2,3],{"a":[null]}]`, `{'a': 1,}`: `{"a":1}`, `[]`: `[]`, `{}`: `{}`,
		`{None: 1, 2.5: 2}`: `{"null":1,"2.5":2}`,
	} {
		got, ok := pythonLiteral(in)
		if !ok || got != want {
			t.Errorf("pythonLiteral(%s) = %s, %v; want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{``, `[1,`, `{'a' 1}`, `'open`, `{[1]: 2}`, `nan`, `1e400`, strings.Repeat("[", 200) + strings.Repeat("]", 200), `True False`} {
		if got, ok := pythonLiteral(bad); ok {
			t.Errorf("pythonLiteral(%q) = %s, want a failure", bad, got)
		}
	}
}

// FuzzParser: no input panics, and the invariants hold for the whole text
// and for the text cut at random.
func FuzzParser(f *testing.F) {
	for _, c := range parseCases {
		f.Add(c.in, c.inReasoning, int64(len(c.in)))
	}
	f.Fuzz(func(t *testing.T, in string, inReasoning bool, seed int64) {
		// The seed's low bits also pick the tools / no-calls variants.
		c := parseCase{in: in, inReasoning: inReasoning, noTools: seed&1 != 0, noCalls: seed&6 == 6}
		whole, ev := parseWhole(c, in)
		checkInvariants(t, whole, ev)
		got, ev := parseChunks(c, randomChunks(rand.New(rand.NewSource(seed)), in))
		checkInvariants(t, got, ev)
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("chunked %#v\nwhole   %#v", got, whole)
		}
		if utf8.ValidString(in) {
			for _, tc := range got.ToolCalls {
				if !utf8.ValidString(tc.Arguments) {
					t.Fatalf("arguments not UTF-8: %q", tc.Arguments)
				}
			}
		}
	})
}

// TestJSONStringBody matches encoding/json's escaping (without HTML
// escaping) on awkward strings.
func TestJSONStringBody(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s/", "\n\r\t\b\f\x00\x1f\x7f", "é中😀", "bad \xff\xfe utf8 \xe4\xb8", "\u2028\u2029", "<&>"} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		want := strings.TrimSuffix(b.String(), "\n")
		if got := jsonString(s); got != want {
			t.Errorf("jsonString(%q) = %s, want %s", s, got, want)
		}
	}
}

// OpenCall tells the call still being written from the finished ones, and
// Unclosed, after Finish, the call the output ended inside, so a reply cut
// at max_tokens can leave the unfinished call out.
func TestOpenCall(t *testing.T) {
	cases := []struct {
		name     string
		text     string
		index    int
		open     bool
		unclosed bool
	}{
		{"no call", "hello", 0, false, false},
		{"finished call", call("a"), 0, false, false},
		{"cut in the second call's value", call("a") + "<tool_call>\n<function=b>\n<parameter=x>\nhal", 1, true, true},
		{"cut after a parameter", "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n", 0, true, true},
		{"cut in </function>", "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</func", 0, true, true},
		{"cut in </tool_call> after </function>, a whole call", "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_", 0, true, false},
		{"ended at </tool_call>, its end pending", "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>", 0, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := New(Options{})
			p.Push(c.text)
			index, open := p.OpenCall()
			if open != c.open || (open && index != c.index) {
				t.Fatalf("OpenCall() = %d, %v; want %d, %v", index, open, c.index, c.open)
			}
			p.Finish()
			index, unclosed := p.Unclosed()
			if unclosed != c.unclosed || (unclosed && index != c.index) {
				t.Fatalf("after Finish, Unclosed() = %d, %v; want %d, %v", index, unclosed, c.index, c.unclosed)
			}
		})
	}
}
