package jsonconstrain

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name   string
		schema string
		want   []string // substrings of the error, in order; none: compiles
	}{
		{"empty schema is any value", `{}`, nil},
		{"true is any value", `true`, nil},
		{"annotations are ignored", `{"title":"x","description":"y","$schema":"z","default":1}`, nil},
		{"full subset", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3},"b":{"enum":["x",1,null]},"c":{"const":{"k":[1]}},"d":{"anyOf":[{"type":"string","maxLength":3},{"type":"null"}]}},"required":["a"],"additionalProperties":false}`, nil},
		{"type list", `{"type":["string","null"]}`, nil},
		{"required outside properties adds the property", `{"required":["x"]}`, nil},
		{"unsupported keyword named with pointer", `{"type":"object","properties":{"name":{"type":"array","uniqueItems":true}}}`,
			[]string{`unsupported schema keyword "uniqueItems" at /properties/name/uniqueItems`}},
		{"every unsupported keyword is named", `{"uniqueItems":true,"not":{}}`,
			[]string{`unsupported schema keyword "not" at /not`, `unsupported schema keyword "uniqueItems" at /uniqueItems`}},
		{"pointer escapes", `{"properties":{"a/b~c":{"uniqueItems":true}}}`, []string{`at /properties/a~1b~0c/uniqueItems`}},
		{"tuple items", `{"items":[{}]}`, []string{`"items" as an array`}},
		{"false schema", `false`, []string{"allows no value at /"}},
		{"not an object", `[1]`, []string{"must be an object or a boolean at /"}},
		{"not JSON", `{`, []string{"schema is not JSON: unexpected end of JSON input at /"}},
		{"unknown type", `{"type":"text"}`, []string{`unknown type "text" at /type`}},
		{"empty type list", `{"type":[]}`, []string{"non-empty array"}},
		{"bad minLength", `{"minLength":-1}`, []string{"minLength must be a non-negative integer at /minLength"}},
		{"fractional maxItems", `{"maxItems":1.5}`, []string{"maxItems must be a non-negative integer"}},
		{"minItems over maxItems", `{"minItems":3,"maxItems":2}`, []string{"minItems 3 is over maxItems 2 at /minItems"}},
		{"minLength over the limit", `{"minLength":100000}`, []string{"minLength 100000 is over nvmai's limit of 4096 characters"}},
		{"required impossible", `{"properties":{},"required":["x"],"additionalProperties":false}`, []string{`required property "x" is not in properties`}},
		{"key needs escaping", `{"properties":{"a\"b":{}}}`, []string{"needs escaping"}},
		{"enum empty", `{"enum":[]}`, []string{"enum must be a non-empty array at /enum"}},
		{"enum wrong types", `{"type":"string","enum":[1,2]}`, []string{"no enum or const value satisfies the keywords beside it"}},
		{"enum refused by the keywords beside it", `{"enum":["ab"],"maxLength":1}`, []string{"no enum or const value satisfies"}},
		{"anyOf ambiguous", `{"anyOf":[{"type":"integer"},{"type":"number"}]}`, []string{"alternatives 0 and 1 can both start with '-'", "at /anyOf/1"}},
		{"anyOf with siblings", `{"anyOf":[{}],"type":"string"}`, []string{`"type" beside anyOf`}},
		{"nested problem pointer", `{"items":{"properties":{"x":{"type":5}}}}`, []string{"at /items/properties/x/type"}},
		{"too deep", strings.Repeat(`{"items":`, 40) + `{}` + strings.Repeat(`}`, 40), []string{"nests 32 levels or deeper"}},
		{"too large", `{"description":"` + strings.Repeat("x", 300<<10) + `"}`, []string{"over the 262144-byte limit"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(json.RawMessage(tc.schema))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				return
			}
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("Compile = %v, want a *SchemaError", err)
			}
			msg, rest := err.Error(), err.Error()
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error %q lacks %q (in order)", msg, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestUnsupportedIsDistinguished(t *testing.T) {
	_, err := Compile(json.RawMessage(`{"uniqueItems":true}`))
	if se := (*SchemaError)(nil); !errors.As(err, &se) || !se.Unsupported() || se.Problems[0].Keyword != "uniqueItems" {
		t.Fatalf("uniqueItems: %v", err)
	}
	_, err = Compile(json.RawMessage(`{"type":"nope"}`))
	if se := (*SchemaError)(nil); !errors.As(err, &se) || se.Unsupported() {
		t.Fatalf("bad type: %v", err)
	}
}

func TestFromResponseFormat(t *testing.T) {
	tests := []struct {
		name, rf  string
		none      bool   // no constraint
		wantErr   string // substring; "" for success
		accepts   string // a document the result must complete
		wantParam string
	}{
		{name: "absent", rf: ``, none: true},
		{name: "null", rf: `null`, none: true},
		{name: "text", rf: `{"type":"text"}`, none: true},
		{name: "json_object", rf: `{"type":"json_object"}`, accepts: `{"x":[1]}`},
		{name: "json_schema", rf: `{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"array","items":{"type":"null"}}}}`, accepts: `[null]`},
		{name: "bad type", rf: `{"type":"yaml"}`, wantErr: `"yaml" is not one of`, wantParam: "response_format.type"},
		{name: "not an object", rf: `"json"`, wantErr: "must be an object", wantParam: "response_format"},
		{name: "schema missing", rf: `{"type":"json_schema","json_schema":{"name":"p"}}`, wantErr: "is missing", wantParam: "response_format.json_schema.schema"},
		{name: "schema unsupported", rf: `{"type":"json_schema","json_schema":{"schema":{"properties":{"d":{"uniqueItems":true}}}}}`,
			wantErr: `unsupported schema keyword "uniqueItems" at /properties/d/uniqueItems`, wantParam: "response_format.json_schema.schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := FromResponseFormat(json.RawMessage(tc.rf), DefaultOptions)
			if tc.wantErr != "" {
				var rfe *ResponseFormatError
				if !errors.As(err, &rfe) || rfe.Param != tc.wantParam || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %s: …%s", err, tc.wantParam, tc.wantErr)
				}
				return
			}
			if err != nil || (s == nil) != tc.none {
				t.Fatalf("schema %v, err %v", s, err)
			}
			if s != nil {
				st := s.Start()
				if !st.AcceptBytes([]byte(tc.accepts)) || !st.Done() {
					t.Fatalf("%s not accepted", tc.accepts)
				}
			}
		})
	}
}
