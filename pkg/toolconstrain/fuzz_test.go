package toolconstrain

import (
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/chatparse"
)

// feed offers each byte of data as a token and takes those Mask allows,
// so that any input drives the constraint through well-formed output. It
// returns the text taken and whether the output may end there.
func feed(t *testing.T, tv *Vocab, v *byteVocab, p Plan, data []byte) (string, bool) {
	c, err := tv.Constrain(p)
	if err != nil {
		t.Fatal(err)
	}
	var text []byte
	row := make([]float32, v.IDCount())
	for _, b := range data {
		clear(row)
		if c.Mask(row) == 0 {
			t.Fatalf("dead end after %q", text)
		}
		if math.IsInf(float64(row[b]), -1) {
			continue
		}
		if _, err := c.Advance(int(b)); err != nil {
			t.Fatalf("after %q: %v", text, err)
		}
		text = append(text, b)
	}
	return string(text), c.st.ended(c.forced)
}

// Whatever bytes are offered, what the constraint lets through parses into
// calls of declared tools whose arguments validate.
func FuzzConstrainedOutputParses(f *testing.F) {
	f.Add([]byte(weatherCall))
	f.Add([]byte("Hi <tool_call>\n<function=write_file>\n<parameter=options>\n{\"mode\": 3}\n</parameter>\n<parameter=path>\nx\n</parameter>\n<parameter=content>\n</parameter\n</parameter>\n</function>\n</tool_call>"))
	f.Add([]byte("<tool_call>\n<function=search>\n<parameter=query>\n{\"q\":\"</parameter>\"}\n</parameter>\n</function>\n</tool_call>\n<tool_call>"))
	v := newByteVocab()
	tv := newTestVocab(f, v, []int{v.end()})
	g := testGrammar(f)
	tools := parseTools(f, testTools)
	f.Fuzz(func(t *testing.T, data []byte) {
		text, ended := feed(t, tv, v, Plan{Grammar: g, Choice: Auto, Parallel: true}, data)
		if !ended {
			return // a call still open: only a finished one must parse
		}
		if _, err := CheckCalls(tools, "", text); err != nil {
			t.Fatalf("%v in %q", err, text)
		}
	})
}

// Any parameters schema compiles or leaves values free without a panic,
// and the calls the constraint then lets through carry only declared
// parameters, every required one among them, as a JSON object.
func FuzzCompileParameters(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string","enum":["x","y"]}},"required":["a"]}`), []byte("<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"))
	f.Add([]byte(`{"properties":{"p":{"$ref":"#/$defs/D"}},"$defs":{"D":{"type":"array","items":{"type":"boolean"}}},"required":["p","q"]}`), []byte("<function=f>\n<parameter=p>\n[true]\n</parameter>\n</function>\n</tool_call>"))
	f.Add([]byte(`{"properties":{"s":{"type":"string","pattern":"a"},"n":{"anyOf":[{"type":"string"},{"type":"null"}]}}}`), []byte("<function=f>\n<parameter=n>\nnull\n</parameter>\n</function>\n</tool_call>"))
	f.Add([]byte(`true`), []byte("<function=f>\n</function>\n</tool_call>"))
	f.Add([]byte(`{"properties":{"d":{"type":"string","format":"date"},"m":{"type":"string","pattern":"^(<|/|\\n|p)*$","maxLength":9}},"required":["d"]}`), []byte("<function=f>\n<parameter=m>\n</p\n</parameter>\n<parameter=d>\n2024-01-31\n</parameter>\n</function>\n</tool_call>"))
	f.Add([]byte(`{"properties":{"u":{"type":"string","format":"uri","minLength":2}}}`), []byte("<function=f>\n<parameter=u>\na:b\n</parameter>\n</function>\n</tool_call>"))
	v := newByteVocab()
	tv := newTestVocab(f, v, []int{v.end()})
	f.Fuzz(func(t *testing.T, params, data []byte) {
		g, err := Compile([]Tool{{Name: "f", Parameters: params}})
		if err != nil {
			return
		}
		text, ended := feed(t, tv, v, Plan{Grammar: g, Choice: Required}, data)
		if !ended {
			return
		}
		pr := chatparse.New(chatparse.Options{Tools: []chatparse.Tool{{Name: "f", Parameters: params}}})
		pr.Push("<tool_call>\n" + text)
		pr.Finish()
		calls := pr.Result().ToolCalls
		if len(calls) != 1 || calls[0].Name != "f" {
			t.Fatalf("calls %+v in %q", calls, text)
		}
		var args map[string]json.RawMessage
		if err := json.Unmarshal([]byte(calls[0].Arguments), &args); err != nil {
			t.Fatalf("arguments %s: %v", calls[0].Arguments, err)
		}
		tl := &g.tools[0]
		for name := range args {
			if !slices.ContainsFunc(tl.params, func(p param) bool { return p.name == name }) {
				t.Fatalf("undeclared parameter %q in %s", name, calls[0].Arguments)
			}
		}
		for i, p := range tl.params {
			if _, ok := args[p.name]; !ok && tl.required&(1<<i) != 0 {
				t.Fatalf("required %q missing from %s", p.name, calls[0].Arguments)
			}
		}
	})
}
