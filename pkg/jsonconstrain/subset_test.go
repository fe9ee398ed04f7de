package jsonconstrain

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// The keywords of issue #40 item 1, each compiled or refused by name.
func TestCompileGrownSubset(t *testing.T) {
	tests := []struct {
		name    string
		schema  string
		keyword string // the keyword a refusal names; "" compiles
		want    string // a substring of the error
	}{
		{"ref to $defs", `{"$defs":{"A":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/$defs/A"}}}`, "", ""},
		{"ref to definitions", `{"definitions":{"A":{"type":"integer"}},"items":{"$ref":"#/definitions/A"}}`, "", ""},
		{"ref to the root", `{"type":"object","properties":{"child":{"$ref":"#"}}}`, "", ""},
		{"ref alias chain", `{"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"type":"null"}},"$ref":"#/$defs/A"}`, "", ""},
		{"ref alias back into a recursion", `{"$defs":{"X":{"type":"object","properties":{"a":{"$ref":"#/$defs/Y"}}},"Y":{"$ref":"#/$defs/X"}},"$ref":"#/$defs/X"}`, "", ""},
		{"ref with annotations", `{"$defs":{"A":{}},"properties":{"a":{"$ref":"#/$defs/A","description":"d","default":null}}}`, "", ""},
		{"unreferenced defs are not compiled", `{"$defs":{"A":{"uniqueItems":true}},"type":"string"}`, "", ""},
		{"ref remote", `{"$ref":"https://example.com/s.json"}`, "$ref", `only local references`},
		{"ref anchor", `{"$ref":"#foo"}`, "$ref", `only local references`},
		{"ref missing", `{"$ref":"#/$defs/Nope"}`, "$ref", `"#/$defs/Nope": no such subschema at /$ref`},
		{"ref not a string", `{"$ref":1}`, "$ref", `$ref must be a string`},
		{"ref beside type merges", `{"$defs":{"A":{}},"$ref":"#/$defs/A","type":"object"}`, "", ""},
		{"ref loop without a container", `{"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A"}},"$ref":"#/$defs/A"}`, "$ref", "refers back to itself"},
		{"ref to itself", `{"$ref":"#"}`, "$ref", "refers back to itself"},
		{"ref problem named at the target", `{"$defs":{"A":{"uniqueItems":true}},"$ref":"#/$defs/A"}`, "uniqueItems", `unsupported schema keyword "uniqueItems" at /$defs/A/uniqueItems`},
		{"required recursion has no instance", `{"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]}`, "", "no instance nested less than 33 levels"},
		{"minItems recursion has no instance", `{"type":"array","items":{"$ref":"#"},"minItems":1}`, "", "no instance nested"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(json.RawMessage(tc.schema))
			checkCompile(t, err, tc.keyword, tc.want)
		})
	}
}

// compileCase is a schema compiled, or refused naming keyword with an
// error containing want, and documents the compiled schema accepts (each
// also valid to the independent validator) and refuses.
type compileCase struct {
	name, schema, keyword, want string
	accepts, refuses            []string
}

func runCompileCases(t *testing.T, tests []compileCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile(json.RawMessage(tc.schema))
			checkCompile(t, err, tc.keyword, tc.want)
			if err != nil {
				return
			}
			for _, doc := range tc.accepts {
				if !accepts(s, []byte(doc)) {
					t.Errorf("refuses %s", doc)
				} else {
					checkDocument(t, tc.schema, []byte(doc))
				}
			}
			for _, doc := range tc.refuses {
				if accepts(s, []byte(doc)) {
					t.Errorf("accepts %s", doc)
				}
			}
		})
	}
}

func checkCompile(t *testing.T, err error, keyword, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		return
	}
	var se *SchemaError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Compile = %v, want …%s", err, want)
	}
	if keyword != "" && se.Problems[0].Keyword != keyword {
		t.Fatalf("problem names keyword %q, want %q", se.Problems[0].Keyword, keyword)
	}
}

// enum and const hold any JSON value, anywhere, beside any other keyword,
// and values compare canonically.
func TestCompileLiterals(t *testing.T) {
	tests := []struct {
		name, schema string
		accepts      []string // every value the compiled schema must allow
		refuses      []string
	}{
		{"object const", `{"const":{"b":[1,{"c":null}],"a":"x"}}`, []string{`{"a":"x","b":[1,{"c":null}]}`}, []string{`{"b":[1,{"c":null}],"a":"x"}`}},
		{"array enum in items", `{"type":"array","items":{"enum":[[1,2],{"k":true},"s"]}}`, []string{`[[1,2],{"k":true},"s"]`}, []string{`[[2,1]]`}},
		{"const in a property", `{"type":"object","properties":{"v":{"const":3}},"required":["v"]}`, []string{`{"v":3}`}, []string{`{"v":4}`}},
		{"const in anyOf", `{"anyOf":[{"const":"a"},{"type":"null"}]}`, []string{`"a"`, `null`}, []string{`"b"`}},
		{"enum filtered by maxLength", `{"enum":["a","abc"],"maxLength":2}`, []string{`"a"`}, []string{`"abc"`}},
		{"enum filtered by type", `{"type":"integer","enum":[1,"1",2.5]}`, []string{`1`}, []string{`"1"`, `2.5`}},
		{"integer-valued number is an integer", `{"type":"integer","enum":[2.0,1e1]}`, []string{`2`, `10`}, []string{`2.0`}},
		{"minus zero is zero", `{"const":-0}`, []string{`0`}, []string{`-0`}},
		{"enum filtered by properties", `{"type":"object","properties":{"a":{"type":"string"}},"enum":[{"a":"x"},{"a":1}]}`, []string{`{"a":"x"}`}, []string{`{"a":1}`}},
		{"const and enum intersect", `{"enum":["a","b"],"const":"b"}`, []string{`"b"`}, []string{`"a"`}},
		{"enum dedups canonically", `{"enum":[1,1.0,{"a":1,"b":2},{"b":2,"a":1}]}`, []string{`1`, `{"a":1,"b":2}`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustCompile(t, tc.schema)
			for _, doc := range tc.accepts {
				if st := s.Start(); !st.AcceptBytes([]byte(doc)) || !st.Done() {
					t.Errorf("%s refused", doc)
				}
				checkDocument(t, tc.schema, []byte(doc))
			}
			for _, doc := range tc.refuses {
				if st := s.Start(); st.AcceptBytes([]byte(doc)) && st.Done() {
					t.Errorf("%s accepted", doc)
				}
			}
		})
	}
	for _, tc := range []struct{ schema, keyword, want string }{
		{`{"const":"a","enum":["b"]}`, "enum", "no enum or const value satisfies"},
		{`{"enum":[{"a":1}],"required":["b"]}`, "enum", "no enum or const value satisfies"},
		{`{"enum":["x"],"uniqueItems":true}`, "uniqueItems", `unsupported schema keyword "uniqueItems"`},
	} {
		_, err := Compile(json.RawMessage(tc.schema))
		checkCompile(t, err, tc.keyword, tc.want)
	}
}

func readSchema(t *testing.T, name string) string {
	b, err := os.ReadFile("testdata/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// grownSchemas exercise the keywords of #40 item 1 in random walks.
func grownSchemas(t *testing.T) []string {
	return []string{
		readSchema(t, "pydantic_person.json"),
		`{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"],"additionalProperties":false}`,
		`{"$defs":{"T":{"anyOf":[{"type":"null"},{"type":"array","items":{"$ref":"#/$defs/T"},"minItems":1,"maxItems":2}]}},"$ref":"#/$defs/T"}`,
		`{"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":150},"p":{"type":"number","minimum":0,"maximum":1},"t":{"type":"integer","exclusiveMaximum":-7}},"required":["age","p","t"]}`,
		`{"type":"array","items":{"type":"number","exclusiveMinimum":-2.5,"maximum":30,"minimum":-99}}`,
		`{"allOf":[{"type":"object","properties":{"a":{"type":"integer","minimum":-3}},"required":["a"]},{"properties":{"a":{"maximum":40},"b":{"type":"string","maxLength":2}},"additionalProperties":false}]}`,
		`{"type":"array","prefixItems":[{"type":"string","maxLength":2},{"type":"integer","minimum":1,"maximum":3}],"items":{"type":"boolean"},"minItems":1}`,
		`{"$defs":{"P":{"type":"array","prefixItems":[{"type":"null"},{"$ref":"#/$defs/P"}],"items":false,"minItems":1}},"$ref":"#/$defs/P"}`,
		`{"type":"array","items":{"enum":[{"k":[1,2]},"s",null,1.0,"toolong"],"maxLength":3},"maxItems":3}`,
		`{"$defs":{"N":{"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"additionalProperties":{"$ref":"#/$defs/N"}}},"$ref":"#/$defs/N"}`,
	}
}

// Random walks through the fixture vocabulary under each grown schema, at
// two depth limits: no dead end (the depth bookkeeping never lets a walk
// open what it cannot close), and every document validates.
func TestRandomWalksGrownSubset(t *testing.T) {
	m, tok, endSet, walks := walkFixture(t, 30, 5)
	shallow := smallOptions
	shallow.MaxKeyBytes = 16 // Pydantic's property names
	deeper := shallow
	deeper.MaxDepth = 5
	for oi, opts := range []Options{shallow, deeper} {
		for si, schemaJSON := range grownSchemas(t) {
			s, err := CompileWithOptions([]byte(schemaJSON), opts)
			if err != nil {
				t.Fatalf("schema %d: %v", si, err)
			}
			rng := rand.New(rand.NewPCG(uint64(si), uint64(oi)))
			for w := 0; w < walks; w++ {
				doc := randomWalk(t, m, tok, s, rng, endSet, w%5 == 0)
				if w < 2 {
					t.Logf("depth %d schema %d walk %d: %s", opts.MaxDepth, si, w, doc)
				}
				checkDocument(t, schemaJSON, doc)
			}
		}
	}
}

// Documents fed byte by byte: the valid ones are accepted whole, the
// invalid ones stop at the named byte.
func TestGrownSubsetDocuments(t *testing.T) {
	person := readSchema(t, "pydantic_person.json")
	tests := []struct {
		name, schema, doc string
		ok                bool
	}{
		{"pydantic nested", person, `{"name":"a","age":1,"address":{"street":"s","city":"c","zip":null},"friends":[{"name":"b","age":2,"address":{"street":"t","city":"d"}}]}`, true},
		{"pydantic missing nested required", person, `{"name":"a","age":1,"address":{"street":"s"}}`, false},
		{"pydantic wrong friend", person, `{"name":"a","age":1,"address":{"street":"s","city":"c"},"friends":[1]}`, false},
		{"recursion to the depth limit", `{"type":"array","items":{"$ref":"#"}}`, strings.Repeat("[", 32) + strings.Repeat("]", 32), true},
		{"recursion past the depth limit", `{"type":"array","items":{"$ref":"#"}}`, strings.Repeat("[", 33) + strings.Repeat("]", 33), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := mustCompile(t, tc.schema).Start()
			ok := st.AcceptBytes([]byte(tc.doc)) && st.Done()
			if ok != tc.ok {
				t.Fatalf("accepted %v, want %v", ok, tc.ok)
			}
			if ok {
				checkDocument(t, tc.schema, []byte(tc.doc))
			}
		})
	}
}

// allOf merges into one schema, or is refused naming what cannot merge.
func TestCompileAllOf(t *testing.T) {
	tests := []compileCase{
		{name: "pydantic v1 field", schema: `{"$defs":{"A":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"type":"object","properties":{"a":{"allOf":[{"$ref":"#/$defs/A"}],"description":"an A"}},"required":["a"]}`,
			accepts: []string{`{"a":{"x":1}}`}, refuses: []string{`{"a":{}}`, `{"a":{"x":"1"}}`}},
		{name: "types intersect", schema: `{"allOf":[{"type":["integer","string"]},{"type":"number"}]}`, accepts: []string{`3`}, refuses: []string{`3.5`, `"s"`}},
		{name: "properties and required union", schema: `{"allOf":[{"properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"b":{"type":"null"}},"required":["b"]}]}`,
			accepts: []string{`{"a":"x","b":null}`}, refuses: []string{`{"a":"x"}`, `{"b":null}`}},
		{name: "same property merges", schema: `{"allOf":[{"properties":{"n":{"type":"integer","minimum":0}}},{"properties":{"n":{"maximum":9}}}]}`,
			accepts: []string{`{"n":9}`, `{"n":0}`}, refuses: []string{`{"n":10}`, `{"n":-1}`}},
		{name: "bounds tighten", schema: `{"allOf":[{"minimum":1,"maxLength":5},{"minimum":3,"maxLength":2}]}`, accepts: []string{`3`, `"ab"`}, refuses: []string{`2`, `"abc"`}},
		{name: "additionalProperties false drops the others' properties", schema: `{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]}`,
			accepts: []string{`{"a":1}`}, refuses: []string{`{"b":1}`}},
		{name: "additionalProperties schema applies to the others' properties", schema: `{"allOf":[{"properties":{"a":{}},"additionalProperties":{"type":"string"}},{"properties":{"b":{}}}]}`,
			accepts: []string{`{"a":1,"b":"s"}`}, refuses: []string{`{"b":1}`}},
		{name: "enums intersect", schema: `{"allOf":[{"enum":["a","b",1]},{"enum":[1.0,"b","c"]}]}`, accepts: []string{`"b"`, `1`}, refuses: []string{`"a"`, `"c"`}},
		{name: "ref beside keywords", schema: `{"$defs":{"S":{"type":"string"}},"$ref":"#/$defs/S","maxLength":1}`, accepts: []string{`"a"`}, refuses: []string{`"ab"`, `1`}},
		{name: "enum beside ref", schema: `{"$defs":{"S":{"type":"string"}},"$ref":"#/$defs/S","enum":["a",1]}`, accepts: []string{`"a"`}, refuses: []string{`1`}},
		{name: "items merge", schema: `{"allOf":[{"items":{"type":"integer"}},{"items":{"minimum":2},"maxItems":2}]}`, accepts: []string{`[2,3]`}, refuses: []string{`[1]`, `[2,3,4]`}},
		{name: "anyOf in one member", schema: `{"allOf":[{"anyOf":[{"type":"string"},{"type":"null"}]},{"description":"x"}]}`, accepts: []string{`null`}},
		{name: "no common type", schema: `{"allOf":[{"type":"string"},{"type":"integer"}]}`, keyword: "type", want: "no type in common"},
		{name: "different consts", schema: `{"allOf":[{"const":1},{"const":2}]}`, keyword: "const", want: "different const values"},
		{name: "no common enum value", schema: `{"allOf":[{"enum":[1]},{"enum":[2]}]}`, keyword: "enum", want: "no value in common"},
		{name: "two anyOfs", schema: `{"allOf":[{"anyOf":[{"type":"string"}]},{"anyOf":[{"type":"null"}]}]}`, keyword: "anyOf", want: "more than one allOf subschema"},
		{name: "anyOf beside merged keywords", schema: `{"allOf":[{"anyOf":[{"type":"string"}]},{"type":"string"}]}`, keyword: "type", want: `"type" beside anyOf`},
		{name: "unsupported inside", schema: `{"allOf":[{"type":"string"},{"uniqueItems":true}]}`, keyword: "uniqueItems", want: `unsupported schema keyword "uniqueItems" at /allOf/1/uniqueItems`},
		{name: "draft 4 boolean", schema: `{"allOf":[{"minimum":1,"exclusiveMinimum":true}]}`, keyword: "exclusiveMinimum", want: "boolean (draft 4) cannot be merged"},
		{name: "required refused by additionalProperties false", schema: `{"allOf":[{"additionalProperties":false},{"properties":{"b":{}},"required":["b"]}]}`, keyword: "additionalProperties", want: `required property "b" is refused`},
		{name: "false member", schema: `{"allOf":[true,false]}`, want: "schema false allows no value at /allOf/1"},
		{name: "ref loop", schema: `{"$defs":{"A":{"allOf":[{"$ref":"#/$defs/A"}]}},"$ref":"#/$defs/A","type":"object"}`, keyword: "allOf", want: "more than 32 deep"},
		{name: "empty allOf", schema: `{"allOf":[]}`, keyword: "allOf", want: "non-empty array"},
	}
	runCompileCases(t, tests)
}

func TestCompilePrefixItems(t *testing.T) {
	tests := []compileCase{
		{name: "prefix then any", schema: `{"prefixItems":[{"type":"string"},{"type":"integer","minimum":0}]}`,
			accepts: []string{`[]`, `["a"]`, `["a",1]`, `["a",1,null,{}]`}, refuses: []string{`[1]`, `["a",-1]`}},
		{name: "prefix then items", schema: `{"type":"array","prefixItems":[{"const":"op"}],"items":{"type":"number"},"minItems":2,"maxItems":3}`,
			accepts: []string{`["op",1]`, `["op",1,2.5]`}, refuses: []string{`["op"]`, `["op",1,2,3]`, `["op","x"]`}},
		{name: "prefix closed by items false", schema: `{"prefixItems":[{"type":"null"},{"type":"boolean"}],"items":false,"minItems":2}`,
			accepts: []string{`[null,true]`}, refuses: []string{`[null]`, `[null,true,null]`}},
		{name: "items false alone is the empty array", schema: `{"type":"array","items":false}`, accepts: []string{`[]`}, refuses: []string{`[1]`}},
		{name: "recursive prefix", schema: `{"type":"array","prefixItems":[{"type":"integer"},{"$ref":"#"}],"items":false}`,
			accepts: []string{`[1,[2,[]]]`, `[]`}, refuses: []string{`[1,2]`}},
		{name: "minItems over a closed prefix", schema: `{"prefixItems":[{}],"items":false,"minItems":2}`, keyword: "minItems", want: "over the 1 prefixItems"},
		{name: "empty prefixItems", schema: `{"prefixItems":[]}`, keyword: "prefixItems", want: "non-empty array"},
		{name: "tuple items", schema: `{"items":[{}]}`, keyword: "items", want: "write it as prefixItems"},
		{name: "bad prefix schema", schema: `{"prefixItems":[{"type":"wat"}]}`, keyword: "type", want: "at /prefixItems/0/type"},
		{name: "prefixItems in allOf", schema: `{"allOf":[{"prefixItems":[{}]}]}`, keyword: "prefixItems", want: "cannot be merged in allOf"},
	}
	runCompileCases(t, tests)
}
