package toolconstrain

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/tokenmask"
)

// testTools cover every kind of value: raw strings (bounded and not), an
// enum, an integer with bounds, a boolean, a nullable string, an object
// and an array, a $ref into $defs, and a tool without parameters.
var testTools = toolList(`"city":{"type":"string","description":"City name"}`, `,"note":{"anyOf":[{"type":"string"},{"type":"null"}]}`)

// toolList is the JSON list of the tools get_weather (whose city property
// is city), write_file, noop and search (with searchExtra after its
// properties query and limit): testTools and RandomTools differ only there.
func toolList(city, searchExtra string) string {
	return `[
 {"name":"get_weather","parameters":{"type":"object","properties":{
   ` + city + `,
   "days":{"type":"integer","minimum":1,"maximum":14},
   "unit":{"type":"string","enum":["celsius","fahrenheit"]},
   "detail":{"type":"boolean"}},
  "required":["city","days"]}},
 {"name":"write_file","parameters":{"type":"object","properties":{
   "path":{"type":"string","minLength":1,"maxLength":12},
   "content":{"type":"string","maxLength":20},
   "options":{"type":"object","properties":{"mode":{"type":"integer"},"tags":{"type":"array","items":{"type":"string","maxLength":5},"maxItems":3}},"required":["mode"],"additionalProperties":false}},
  "required":["path","content"]}},
 {"name":"noop","parameters":{"type":"object","properties":{}}},
 {"name":"search","parameters":{"type":"object","$defs":{"Q":{"type":"object","properties":{"q":{"type":"string","maxLength":8}},"required":["q"],"additionalProperties":false}},
   "properties":{"query":{"$ref":"#/$defs/Q"},"limit":{"anyOf":[{"type":"integer","maximum":99},{"type":"null"}]}` + searchExtra + `},
  "required":["query"]}}
]`
}

func parseTools(t testing.TB, raw string) []Tool {
	t.Helper()
	var list []struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		t.Fatal(err)
	}
	var tools []Tool
	for _, x := range list {
		tools = append(tools, Tool{Name: x.Name, Parameters: x.Parameters})
	}
	return tools
}

// compileTools parses raw (a JSON list of {name, parameters}) and
// compiles it.
func compileTools(t testing.TB, raw string) ([]Tool, *Grammar) {
	t.Helper()
	tools := parseTools(t, raw)
	g, err := Compile(tools)
	if err != nil {
		t.Fatal(err)
	}
	return tools, g
}

// strictGrammar is raw's grammar, failing the test if any parameter is
// left free.
func strictGrammar(t testing.TB, raw string) *Grammar {
	t.Helper()
	_, g := compileTools(t, raw)
	requireNoFallbacks(t, g)
	return g
}

func requireNoFallbacks(t testing.TB, g *Grammar) {
	t.Helper()
	if len(g.Fallbacks) > 0 {
		t.Fatalf("fallbacks: %q", g.Fallbacks)
	}
}

func testGrammar(t testing.TB) *Grammar { return strictGrammar(t, testTools) }

// byteVocab has one token per byte, some markup tokens, and two special
// tokens, the first an end token.
type byteVocab struct {
	toks    [][]byte
	special map[int]bool
}

func newByteVocab(extra ...string) *byteVocab {
	v := &byteVocab{special: map[int]bool{}}
	for b := 0; b < 256; b++ {
		v.toks = append(v.toks, []byte{byte(b)})
	}
	for _, s := range extra {
		v.toks = append(v.toks, []byte(s))
	}
	for _, s := range []string{"<|im_end|>", "<|im_start|>"} {
		v.special[len(v.toks)] = true
		v.toks = append(v.toks, []byte(s))
	}
	return v
}

func (v *byteVocab) IDCount() int             { return len(v.toks) }
func (v *byteVocab) TokenBytes(id int) []byte { return v.toks[id] }
func (v *byteVocab) IsSpecial(id int) bool    { return v.special[id] }
func (v *byteVocab) end() int                 { return len(v.toks) - 2 }

var markupTokens = []string{"<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
	">\n", "\n</parameter>\n", "\n</", "get_weather", "city", "Paris", "}\n", "\n\n", "ameter>", "celsius", "</think>"}

func newTestVocab(t testing.TB, v jsonconstrain.Vocabulary, ends []int) *Vocab {
	t.Helper()
	jm, err := jsonconstrain.NewMasker(v, ends)
	if err != nil {
		t.Fatal(err)
	}
	tv, err := NewVocab(v, ends, jm)
	if err != nil {
		t.Fatal(err)
	}
	return tv
}

// clone copies a constraint, its JSON automaton included.
func clone(c *Constraint) *Constraint {
	d := *c
	if c.st.json != nil {
		d.st.json = c.st.json.Clone()
	}
	d.bits = make([]uint64, len(c.bits))
	d.jmk = jsonconstrain.Mask{}
	d.scratch = tokenmask.Scratch{}
	return &d
}

// allowedRow masks a row of zeros and reports which ids stay.
func allowedRow(c *Constraint, n int) ([]bool, int) {
	row := make([]float32, n)
	count := c.Mask(row)
	ok := make([]bool, n)
	for i, x := range row {
		ok[i] = !math.IsInf(float64(x), -1)
	}
	return ok, count
}

const weatherCall = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"

// Each case feeds good one byte token at a time (every byte must be
// allowed by Mask and taken by Advance), then checks that the first byte
// of bad is masked and refused, and whether the end token is allowed after
// good.
func TestAutomatonTable(t *testing.T) {
	v := newByteVocab()
	tv := newTestVocab(t, v, []int{v.end()})
	g := testGrammar(t)
	body := "<tool_call>\n<function=get_weather>\n"
	for _, tc := range []struct {
		name      string
		plan      Plan
		good, bad string
		end       bool
	}{
		{"free text then a call", Plan{Choice: Auto, Parallel: true}, "Sure, checking.\n\n" + weatherCall, "x", true},
		{"free text ends", Plan{Choice: Auto}, "Just text <tool_ no call", "", true},
		{"reasoning then a call", Plan{Choice: Auto}, "let me think</think>\n\n" + weatherCall, "", true},
		{"two calls in parallel", Plan{Choice: Auto, Parallel: true}, weatherCall + "\n" + weatherCall + "\n", "", true},
		{"one call only", Plan{Choice: Auto}, weatherCall + "\n", "<", true},
		{"no text after a call", Plan{Choice: Auto, Parallel: true}, weatherCall + " ", "D", true},
		{"wrong name", Plan{Choice: Auto}, "<tool_call>\n<function=get_we", "t", false},
		{"name not closed by >", Plan{Choice: Auto}, "<tool_call>\n<function=noop", " ", false},
		{"layout: newline after <tool_call>", Plan{Choice: Auto}, "<tool_call>", " ", false},
		{"unknown parameter", Plan{Choice: Auto}, body + "<parameter=", "t", false},
		{"unknown parameter sharing a prefix", Plan{Choice: Auto}, body + "<parameter=cit", "i", false},
		{"repeated parameter", Plan{Choice: Auto}, body + "<parameter=city>\nA\n</parameter>\n<parameter=", "c", false},
		{"missing required before </function>", Plan{Choice: Auto}, body + "<parameter=city>\nA\n</parameter>\n<", "/", false},
		{"no parameter left: only </function>", Plan{Choice: Auto}, "<tool_call>\n<function=noop>\n<", "p", false},
		{"integer: not a number", Plan{Choice: Auto}, body + "<parameter=days>\n", "t", false},
		{"integer: no fraction", Plan{Choice: Auto}, body + "<parameter=days>\n3", ".", false},
		{"integer: maximum", Plan{Choice: Auto}, body + "<parameter=days>\n1", "5", false},
		{"integer: JSON whitespace before the close", Plan{Choice: Auto}, body + "<parameter=days>\n 12 \n\n</parameter>\n<parameter=city>\nx\n</parameter>\n</function>\n</tool_call>", "", true},
		{"enum value", Plan{Choice: Auto}, body + "<parameter=unit>\ncelsius\n</parameter>\n", "", false},
		{"enum refuses others", Plan{Choice: Auto}, body + "<parameter=unit>\ncel", "l", false},
		{"boolean", Plan{Choice: Auto}, body + "<parameter=detail>\ntrue\n</parameter>\n", "", false},
		{"boolean refuses text", Plan{Choice: Auto}, body + "<parameter=detail>\n", "y", false},
		{"raw value: </parameter> mid-line", Plan{Choice: Auto}, body + "<parameter=city>\nab</parameter", ">", false},
		{"raw value: <parameter= at a line start", Plan{Choice: Auto}, body + "<parameter=city>\nab\n<parameter", "=", false},
		{"raw value: </function> at a line start", Plan{Choice: Auto}, body + "<parameter=city>\nab\n</function", ">", false},
		{"raw value: markup mid-line is text", Plan{Choice: Auto}, body + "<parameter=city>\na <parameter=x> </function> b\n</parameter>\n", "", false},
		{"raw value: empty", Plan{Choice: Auto}, body + "<parameter=city>\n</parameter>\n", "", false},
		{"bounded raw: maxLength", Plan{Choice: Auto}, "<tool_call>\n<function=write_file>\n<parameter=path>\n123456789012", "3", false},
		{"bounded raw: maxLength then close", Plan{Choice: Auto}, "<tool_call>\n<function=write_file>\n<parameter=path>\n123456789012\n</parameter>\n", "", false},
		{"bounded raw: minLength", Plan{Choice: Auto}, "<tool_call>\n<function=write_file>\n<parameter=path>\n</parameter", ">", false},
		{"bounded raw: invalid UTF-8", Plan{Choice: Auto}, "<tool_call>\n<function=write_file>\n<parameter=path>\n\xe4", "a", false},
		{"object value", Plan{Choice: Auto}, "<tool_call>\n<function=write_file>\n<parameter=options>\n{\"mode\": 1, \"tags\": [\"a\"]}\n</parameter>\n", "", false},
		{"object: unknown key", Plan{Choice: Auto}, "<tool_call>\n<function=write_file>\n<parameter=options>\n{\"", "x", false},
		{"$ref value", Plan{Choice: Auto}, "<tool_call>\n<function=search>\n<parameter=query>\n{\"q\":\"go\"}\n</parameter>\n<parameter=limit>\nnull\n</parameter>\n</function>\n</tool_call>", "", true},
		{"end refused inside a call", Plan{Choice: Auto}, body + "<parameter=city>\nPar", "", false},
		{"none: <tool_call> refused", Plan{Choice: None}, "I will not call <tool_call", ">", true},
		{"required: a call from the first token", Plan{Choice: Required}, "", "H", false},
		{"required: the call", Plan{Choice: Required}, "<function=noop>\n</function>\n</tool_call>", "", true},
		{"named: parameters from the first token", Plan{Choice: Named, Name: "get_weather"}, "<parameter=days>\n2\n</parameter>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>", "", true},
		{"named: not another function", Plan{Choice: Named, Name: "noop"}, "<", "p", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.plan.Grammar = g
			c, err := tv.Constrain(tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(tc.good); i++ {
				id := int(tc.good[i])
				ok, _ := allowedRow(c, v.IDCount())
				if !ok[id] {
					t.Fatalf("byte %d (%q) of %q masked", i, tc.good[i], tc.good[:i+1])
				}
				if _, err := c.Advance(id); err != nil {
					t.Fatalf("byte %d of %q: %v", i, tc.good[:i+1], err)
				}
			}
			ok, _ := allowedRow(c, v.IDCount())
			if ok[v.end()] != tc.end {
				t.Errorf("end token allowed = %v, want %v", ok[v.end()], tc.end)
			}
			if tc.bad != "" {
				id := int(tc.bad[0])
				if ok[id] {
					t.Errorf("%q allowed after %q", tc.bad[:1], tc.good)
				}
				if _, err := clone(c).Advance(id); err == nil {
					t.Errorf("Advance took %q after %q", tc.bad[:1], tc.good)
				}
			}
		})
	}
}

// Mask and Advance agree on every token of a vocabulary with multi-byte
// markup tokens, at every step of several valid outputs.
func TestMaskAgreesWithAdvance(t *testing.T) {
	v := newByteVocab(markupTokens...)
	tv := newTestVocab(t, v, []int{v.end()})
	g := testGrammar(t)
	outputs := []struct {
		plan Plan
		text string
	}{
		{Plan{Choice: Auto, Parallel: true}, "Hi <tool_ca x</think>\n\n" + weatherCall + "\n" + weatherCall},
		{Plan{Choice: Required}, "<function=write_file>\n<parameter=options>\n{\"mode\":2,\"tags\":[]}  \n</parameter>\n<parameter=content>\nab\n<x\n</parameter>\n<parameter=path>\n\xc3\xa9t\xc3\xa9\n</parameter>\n</function>\n</tool_call>"},
		{Plan{Choice: Named, Name: "search"}, "<parameter=note>\nnull\n</parameter>\n<parameter=query>\n{\"q\":\"a</b\"}\n</parameter>\n</function>\n</tool_call>"},
		{Plan{Choice: None}, "plain <tool_cal text"},
	}
	for _, o := range outputs {
		o.plan.Grammar = g
		c, err := tv.Constrain(o.plan)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i <= len(o.text); i++ {
			ok, count := allowedRow(c, v.IDCount())
			n := 0
			for id := range ok {
				_, err := clone(c).Advance(id)
				if ok[id] != (err == nil) {
					t.Fatalf("after %q: token %d (%q) mask %v, Advance error %v", o.text[:i], id, v.toks[id], ok[id], err)
				}
				if ok[id] {
					n++
				}
			}
			if n != count {
				t.Fatalf("after %q: Mask reports %d allowed, %d are", o.text[:i], count, n)
			}
			if c.Idle() && n != len(ok) {
				t.Fatalf("after %q: idle, but %d of %d tokens allowed", o.text[:i], n, len(ok))
			}
			if i < len(o.text) {
				if _, err := c.Advance(int(o.text[i])); err != nil {
					t.Fatalf("after %q: %v", o.text[:i], err)
				}
			}
		}
	}
}

// fallbackTools have parameters the grammar leaves free (a format it does
// not enforce, a pattern no automaton can, string mixed with object, a
// keyword it does not know) beside ones it constrains (a date, a pattern),
// and a tool without a usable name.
const fallbackTools = `[{"name":"f","parameters":{"type":"object","properties":{
	"when":{"type":"string","format":"color"},
	"re":{"type":"string","pattern":"^(a)\\1$"},
	"day":{"type":"string","format":"date"},
	"as":{"type":"string","pattern":"^a+$"},
	"mixed":{"type":["string","object"]},
	"flag":{"type":["boolean","string"]},
	"same":{"$ref":"#/properties/ok"},
	"odd":{"type":"object","not":{}},
	"ok":{"type":"integer"}}}},
	{"name":"bad name","parameters":{}}]`

func TestCompileFallbacks(t *testing.T) {
	g, err := Compile(parseTools(t, fallbackTools))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(g.Fallbacks, "\n")
	for _, want := range []string{`f.when: keyword "format"`, `f.re: keyword "pattern"`, "f.mixed: mixes string", `f.odd: keyword "not"`} {
		if !strings.Contains(got, want) {
			t.Errorf("fallbacks %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "f.ok") || strings.Contains(got, "f.day") || strings.Contains(got, "f.as") || strings.Contains(got, "f.flag") || strings.Contains(got, "f.same") || g.HasTool("bad name") || !g.HasTool("f") {
		t.Errorf("fallbacks %q, tools %v", got, g.lits)
	}
	if _, err := Compile(parseTools(t, `[{"name":"a b"}]`)); err == nil {
		t.Error("a list without a usable name compiled")
	}
	g2, _ := Compile(parseTools(t, fallbackTools))
	if g2 != g {
		t.Error("the same tools compiled twice (no cache)")
	}
}

// A JSON argument's string without maxLength may be a whole file, longer
// than a response_format document's 4096-character bound, and the JSON
// may be indented.
func TestJSONValuesHoldLongStrings(t *testing.T) {
	v := newByteVocab()
	tv := newTestVocab(t, v, []int{v.end()})
	g, err := Compile(parseTools(t, `[{"name":"edit","parameters":{"type":"object","properties":{"edits":{"type":"array","items":{"type":"object","properties":{"new":{"type":"string"}}}}},"required":["edits"]}}]`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tv.Constrain(Plan{Grammar: g, Choice: Named, Name: "edit"})
	if err != nil {
		t.Fatal(err)
	}
	text := "<parameter=edits>\n[\n        {\n            \"new\": \"" + strings.Repeat("x", 6000) + "\"\n        }\n]\n</parameter>\n</function>\n</tool_call>"
	for i := 0; i < len(text); i++ {
		if _, err := c.Advance(int(text[i])); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if ended, err := c.Advance(v.end()); !ended || err != nil {
		t.Fatalf("end: %v %v", ended, err)
	}
}

// What the real Qwen3.6 chat template writes for an assistant turn's
// calls is exactly what the constraint lets through.
func TestTemplateRenderedCallsPass(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "chattemplate", "testdata", "models", "qwen36", "chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	calls := []chattemplate.ToolCall{
		{ID: "a", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris","days":3,"unit":"celsius","detail":true}`)},
		{ID: "b", Name: "write_file", Arguments: json.RawMessage(`{"path":"a.txt","content":"line 1\nline 2\n","options":{"mode":1,"tags":["a","bc"]}}`)},
		{ID: "c", Name: "noop", Arguments: json.RawMessage(`{}`)},
	}
	out, err := tmpl.Render(chattemplate.Input{Messages: []chattemplate.Message{
		{Role: "user", Content: "Go."},
		{Role: "assistant", Content: "Calling.", ToolCalls: calls},
	}})
	if err != nil {
		t.Fatal(err)
	}
	start, end := strings.Index(out, "<tool_call>"), strings.LastIndex(out, "</tool_call>")
	if start < 0 || end < 0 {
		t.Fatalf("no calls in %q", out)
	}
	text := out[strings.LastIndex(out[:start], "Calling.") : end+len("</tool_call>")]
	v := newByteVocab()
	tv := newTestVocab(t, v, []int{v.end()})
	c, err := tv.Constrain(Plan{Grammar: testGrammar(t), Choice: Auto, Parallel: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(text); i++ {
		if _, err := c.Advance(int(text[i])); err != nil {
			t.Fatalf("the template's %q: %v", text[:i+1], err)
		}
	}
	if ended, err := c.Advance(v.end()); !ended || err != nil {
		t.Fatalf("end after the template's calls: %v %v", ended, err)
	}
}

// Idle (the device may sample the row where it is) only where Mask would
// allow every token: free text in which no token opens a call the grammar
// refuses.
func TestIdle(t *testing.T) {
	v := newByteVocab("<tool_call>", "_call>x", "call>")
	tv := newTestVocab(t, v, []int{v.end()})
	g := testGrammar(t)
	for _, tc := range []struct {
		name   string
		plan   Plan
		prefix string
		want   bool
	}{
		{"auto, text", Plan{Choice: Auto}, "Hello", true},
		{"auto, a token would open a call badly", Plan{Choice: Auto}, "Hello <tool", false}, // "_call>x"
		{"auto, mid-tag", Plan{Choice: Auto}, "Hello <tool_", true},
		{"none, text", Plan{Choice: None}, "Hello", false},
		{"inside a call", Plan{Choice: Auto}, "<tool_call>\n", false},
		{"required", Plan{Choice: Required}, "", false},
	} {
		tc.plan.Grammar = g
		c, err := tv.Constrain(tc.plan)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(tc.prefix); i++ {
			if _, err := c.Advance(int(tc.prefix[i])); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.Idle(); got != tc.want {
			t.Errorf("%s: idle %v, want %v", tc.name, got, tc.want)
		}
		ok, n := allowedRow(c, v.IDCount())
		if c.Idle() && n != len(ok) {
			t.Errorf("%s: idle, but %d of %d allowed", tc.name, n, len(ok))
		}
	}
}

// References that branch into themselves are inlined within a budget: the
// schema compiles or falls back at once, never blows up.
func TestSelfBranchingRefsStayBounded(t *testing.T) {
	refs := strings.Repeat(`{"$ref":"#/properties/a"},`, 10)
	params := `{"type":"object","properties":{"a":{"anyOf":[` + strings.TrimSuffix(refs, ",") + `]}}}`
	done := make(chan error, 1)
	go func() {
		_, err := Compile([]Tool{{Name: "loop", Parameters: json.RawMessage(params)}})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("compiling self-branching references did not finish")
	}
}
