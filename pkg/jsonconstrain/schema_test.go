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
		{"unsupported keyword named with pointer", `{"type":"object","properties":{"name":{"type":"string","pattern":"^a"}}}`,
			[]string{`unsupported schema keyword "pattern" at /properties/name/pattern`}},
		{"every unsupported keyword is named", `{"minimum":1,"$ref":"#/x"}`,
			[]string{`unsupported schema keyword "$ref" at /$ref`, `unsupported schema keyword "minimum" at /minimum`}},
		{"pointer escapes", `{"properties":{"a/b~c":{"format":"date"}}}`, []string{`at /properties/a~1b~0c/format`}},
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
		{"enum wrong types", `{"type":"string","enum":[1,2]}`, []string{"no enum or const value has an allowed type"}},
		{"enum beside other keywords", `{"enum":["a"],"maxLength":1}`, []string{`"maxLength" beside enum`}},
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
	_, err := Compile(json.RawMessage(`{"pattern":"x"}`))
	if se := (*SchemaError)(nil); !errors.As(err, &se) || !se.Unsupported() || se.Problems[0].Keyword != "pattern" {
		t.Fatalf("pattern: %v", err)
	}
	_, err = Compile(json.RawMessage(`{"type":"nope"}`))
	if se := (*SchemaError)(nil); !errors.As(err, &se) || se.Unsupported() {
		t.Fatalf("bad type: %v", err)
	}
}
