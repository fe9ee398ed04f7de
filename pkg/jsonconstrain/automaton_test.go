package jsonconstrain

import (
	"encoding/json"
	"testing"
)

const personSchema = `{"type":"object","properties":{
	"name":{"type":"string","minLength":1,"maxLength":5},
	"age":{"type":"integer"},
	"tags":{"type":"array","items":{"enum":["a","bc",12]},"maxItems":2},
	"nick":{"type":["string","null"]},
	"ok":{"type":"boolean"}},
	"required":["name","age"],"additionalProperties":false}`

func mustCompile(t testing.TB, schema string) *Schema {
	t.Helper()
	if schema == "" {
		return ObjectMode(DefaultOptions)
	}
	s, err := Compile(json.RawMessage(schema))
	if err != nil {
		t.Fatalf("Compile(%s): %v", schema, err)
	}
	return s
}

// TestAutomaton feeds documents byte by byte: refusedAt is the offset of
// the first byte the automaton must refuse (-1: it accepts all), done
// whether the accepted bytes form a complete document.
func TestAutomaton(t *testing.T) {
	tests := []struct {
		name, schema, doc string
		refusedAt         int
		done              bool
	}{
		{"object mode empty", "", `{}`, -1, true},
		{"object mode nested", "", `{"a":[1,-2.5e+3,"x\u00e9\n",true,false,null,{"b":{}}],"c":{}}`, -1, true},
		{"object mode refuses array root", "", `[]`, 0, false},
		{"object mode refuses scalar root", "", `1`, 0, false},
		{"leading and inner whitespace", "", " {\n\t\"a\" : 1 ,\r\n\"b\":[ ]\n}\n", -1, true},
		{"whitespace run bounded", "", `{     "a":1}`, 5, false},
		{"prefix is not done", "", `{"a":`, -1, false},
		{"nothing after the document", "", `{}x`, 2, true},
		{"trailing comma", "", `{"a":1,}`, 7, false},
		{"leading zero", "", `{"a":01}`, 6, false},
		{"bad escape", "", `{"a":"\x"}`, 7, false},
		{"control char in string", "", "{\"a\":\"\x01\"}", 6, false},
		{"invalid utf8", "", "{\"a\":\"\xff\"}", 6, false},
		{"overlong utf8", "", "{\"a\":\"\xc0\x80\"}", 6, false},
		{"surrogate utf8", "", "{\"a\":\"\xed\xa0\x80\"}", 7, false},
		{"surrogate escape", "", `{"a":"\ud83d"}`, 9, false},
		{"escaped key refused", "", `{"\u0061":1}`, 2, false},
		{"person minimal", personSchema, `{"name":"Al","age":3}`, -1, true},
		{"person any order", personSchema, `{"age":-3,"ok":true,"name":"Al","nick":null,"tags":["bc",12]}`, -1, true},
		{"required before close", personSchema, `{"name":"Al"}`, 12, false},
		{"unknown key", personSchema, `{"nam":1}`, 5, false},
		{"unknown key prefix", personSchema, `{"x`, 2, false},
		{"duplicate key", personSchema, `{"age":1,"age":2}`, 10, false},
		{"integer refuses fraction", personSchema, `{"age":1.5`, 8, false},
		{"minLength", personSchema, `{"name":""`, 9, false},
		{"maxLength", personSchema, `{"name":"abcdef"`, 14, false},
		{"maxLength counts characters", personSchema, `{"name":"ééééé","age":0}`, -1, true},
		{"enum item", personSchema, `{"tags":["b"]`, 11, false},
		{"enum number ends", personSchema, `{"tags":[12,1]`, 13, false},
		{"maxItems", personSchema, `{"tags":["a","a",`, 16, false},
		{"nullable", personSchema, `{"nick":nul`, -1, false},
		{"nullable refuses number", personSchema, `{"nick":1`, 8, false},
		{"root number", `{"type":"number"}`, `-0.5E-7`, -1, true},
		{"root number incomplete", `{"type":"number"}`, `-0.`, -1, false},
		{"exponent two digits", `{"type":"number"}`, `1E+99`, -1, true},
		{"exponent bounded", `{"type":"number"}`, `1e999`, 4, true},
		{"root integer", `{"type":"integer"}`, `120`, -1, true},
		{"root bool", `{"type":"boolean"}`, `tru`, -1, false},
		{"root bool wrong", `{"type":"boolean"}`, `trux`, 3, false},
		{"root const", `{"const":{"b":[1,2],"a":"x"}}`, `{"a":"x","b":[1,2]}`, -1, true},
		{"const is compact", `{"const":[1,2]}`, `[1, 2]`, 3, false},
		{"enum prefix of another", `{"enum":[1,12]}`, `1`, -1, true},
		{"anyOf dispatch", `{"anyOf":[{"type":"string","maxLength":1},{"type":"array","items":{"type":"null"}}]}`, `[null,null]`, -1, true},
		{"anyOf dispatch string", `{"anyOf":[{"type":"string","maxLength":1},{"type":"array"}]}`, `"ab"`, 2, false},
		{"additional schema", `{"additionalProperties":{"type":"integer"}}`, `{"x":1,"y":"s"}`, 11, false},
		{"empty array needs minItems 0", `{"type":"array","minItems":1}`, `[]`, 1, false},
		{"minItems met", `{"type":"array","minItems":1}`, `[{}]`, -1, true},
		{"property value nested", `{"properties":{"a":{"properties":{"b":{"type":"null"}},"required":["b"]}},"required":["a"]}`, `{"a":{"b":null}}`, -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := mustCompile(t, tc.schema).Start()
			refused := -1
			for i := 0; i < len(tc.doc); i++ {
				if !st.Accept(tc.doc[i]) {
					refused = i
					break
				}
			}
			if refused != tc.refusedAt {
				t.Fatalf("refused at %d, want %d (%q)", refused, tc.refusedAt, tc.doc)
			}
			if st.Done() != tc.done {
				t.Fatalf("Done = %v, want %v", st.Done(), tc.done)
			}
			if tc.done {
				end := len(tc.doc)
				if refused >= 0 {
					end = refused
				}
				checkDocument(t, tc.schema, []byte(tc.doc[:end]))
			}
		})
	}
}

func TestAcceptBytesIsAllOrNothing(t *testing.T) {
	st := mustCompile(t, "").Start()
	if !st.AcceptBytes([]byte(`{"a":`)) {
		t.Fatal("prefix refused")
	}
	if st.AcceptBytes([]byte(`1]`)) {
		t.Fatal("1] accepted")
	}
	if !st.AcceptBytes([]byte(`2}`)) || !st.Done() {
		t.Fatal(`the state moved on a refused token: {"a":2} not accepted`)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	st := mustCompile(t, personSchema).Start()
	st.AcceptBytes([]byte(`{"name":"A`))
	c := st.Clone()
	c.AcceptBytes([]byte(`","age":1}`))
	if !c.Done() || st.Done() || !st.AcceptBytes([]byte(`b","age":2}`)) || !st.Done() {
		t.Fatal("clone and original share state")
	}
}

// Long documents compact the arena; the state must survive it.
func TestLongDocument(t *testing.T) {
	st := mustCompile(t, `{"type":"array","items":{"type":"string"}}`).Start()
	doc := []byte(`[`)
	for i := 0; i < 500; i++ {
		doc = append(doc, `"abc",`...)
	}
	doc = append(doc, `"z"]`...)
	if !st.AcceptBytes(doc) || !st.Done() || len(st.m.f) > 2048 {
		t.Fatalf("long array: done=%v frames=%d", st.Done(), len(st.m.f))
	}
}
