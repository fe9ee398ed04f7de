package jsonconstrain

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"
)

const petSchema = `{"$defs":{
 "Cat":{"type":"object","properties":{"pet_type":{"const":"cat","type":"string"},"lives":{"type":"integer","minimum":0,"maximum":9}},"required":["pet_type","lives"],"additionalProperties":false},
 "Dog":{"type":"object","properties":{"pet_type":{"enum":["dog","puppy"]},"bark":{"type":"string","maxLength":4}},"required":["pet_type"],"additionalProperties":false},
 "Fish":{"type":"object","properties":{"pet_type":{"const":"fish"}},"required":["pet_type"]}},
 "type":"object","properties":{"pet":{"oneOf":[{"$ref":"#/$defs/Cat"},{"$ref":"#/$defs/Dog"},{"$ref":"#/$defs/Fish"},{"type":"null"}],
  "discriminator":{"propertyName":"pet_type","mapping":{"cat":"#/$defs/Cat","dog":"#/$defs/Dog","fish":"#/$defs/Fish"}}}},
 "required":["pet"],"additionalProperties":false}`

// oneOf (and anyOf) compile where the alternatives are provably disjoint:
// different first bytes (types), or objects with a discriminator.
func TestCompileUnions(t *testing.T) {
	tests := []compileCase{
		{name: "oneOf of types", schema: `{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}`,
			accepts: []string{`"a"`, `3`, `null`}, refuses: []string{`true`, `1.5`}},
		{name: "oneOf of enums", schema: `{"oneOf":[{"enum":["a","b"]},{"const":"c"}]}`, keyword: "oneOf", want: `alternatives 0 and 1 can both start with '"'`},
		{name: "oneOf of two strings", schema: `{"oneOf":[{"type":"string","maxLength":2},{"type":"string","minLength":3}]}`, keyword: "oneOf", want: `nvmai supports oneOf only when each alternative starts differently`},
		{name: "oneOf of overlapping numbers", schema: `{"oneOf":[{"type":"integer"},{"type":"number"}]}`, keyword: "oneOf", want: `alternatives 0 and 1 can both start with '-'`},
		{name: "oneOf of signed numbers", schema: `{"oneOf":[{"type":"integer","maximum":-1},{"type":"number","minimum":1}]}`,
			accepts: []string{`-3`, `1`, `2.5`}, refuses: []string{`-0.5`, `0.5`}},
		{name: "discriminated pets", schema: petSchema,
			accepts: []string{`{"pet":{"pet_type":"cat","lives":3}}`, `{"pet":{"pet_type":"puppy"}}`, `{"pet":{"pet_type":"dog","bark":"woof"}}`, `{"pet":{"pet_type":"fish","fins":2}}`, `{"pet":null}`},
			refuses: []string{`{"pet":{"pet_type":"cat"}}`, `{"pet":{"pet_type":"cat","lives":3,"bark":"x"}}`, `{"pet":{"pet_type":"dog","lives":3}}`, `{"pet":{"pet_type":"cow"}}`, `{"pet":{}}`,
				`{"pet":{"lives":3,"pet_type":"cat"}}`}}, // the discriminator is written first
		{name: "anyOf discriminated", schema: `{"anyOf":[{"type":"object","properties":{"k":{"const":1},"a":{"type":"string"}},"required":["k"]},{"type":"object","properties":{"k":{"const":2}},"required":["k"],"additionalProperties":false}]}`,
			accepts: []string{`{"k":1,"a":"x","z":0}`, `{"k":2}`}, refuses: []string{`{"k":2,"a":"x"}`, `{"k":3}`}},
		{name: "objects told apart by keys", schema: reviewCommentSchema,
			accepts: []string{`[{"position":3,"path":"a","body":"b"},{"line":7,"body":"c","path":"d"}]`, `[]`},
			refuses: []string{`[{"path":"a","position":3,"body":"b"}]`, // the telling key comes first
				`[{"position":3,"line":4,"path":"a","body":"b"}]`, `[{"line":1,"path":"a"}]`, `[{}]`}},
		{name: "keys shared", schema: `{"oneOf":[{"type":"object","properties":{"a":{},"b":{}},"additionalProperties":false},{"type":"object","properties":{"a":{}},"additionalProperties":false}]}`,
			keyword: "oneOf", want: "nor does each have a property the others forbid"},
		{name: "objects without a discriminator", schema: `{"oneOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}]}`,
			keyword: "oneOf", want: `alternatives [0 1] are all objects, and no required const or enum property tells them apart ("a" has no const or enum in alternative 0)`},
		{name: "discriminator not required", schema: `{"oneOf":[{"type":"object","properties":{"t":{"const":"a"}}},{"type":"object","properties":{"t":{"const":"b"}},"required":["t"]}]}`,
			keyword: "oneOf", want: `"t" is not required in alternative 0`},
		{name: "discriminator value shared", schema: `{"oneOf":[{"type":"object","properties":{"t":{"enum":["a","b"]}},"required":["t"]},{"type":"object","properties":{"t":{"const":"b"}},"required":["t"]}]}`,
			keyword: "oneOf", want: `"t" has the value "b" in two alternatives`},
		{name: "discriminator without const", schema: `{"oneOf":[{"type":"object","properties":{"t":{"type":"string"}},"required":["t"]},{"type":"object","properties":{"t":{"const":"b"}},"required":["t"]}]}`,
			keyword: "oneOf", want: `"t" has no const or enum in alternative 0`},
		{name: "beside other keywords", schema: `{"type":"object","oneOf":[{"type":"object"}]}`, keyword: "type", want: `unsupported schema keyword "type" beside oneOf`},
		{name: "oneOf in allOf", schema: `{"allOf":[{"oneOf":[{"type":"string"},{"type":"null"}]}]}`, accepts: []string{`"x"`, `null`}, refuses: []string{`1`}},
		{name: "oneOf and anyOf in allOf", schema: `{"allOf":[{"oneOf":[{"type":"string"}]},{"anyOf":[{"type":"null"}]}]}`, keyword: "anyOf", want: `anyOf in more than one allOf subschema (also at /allOf/0/oneOf) cannot be merged`},
		{name: "not an array", schema: `{"oneOf":{}}`, keyword: "oneOf", want: `oneOf must be a non-empty array`},
	}
	runCompileCases(t, tests)
}

// reviewCommentSchema is mcp-server-github's create_pull_request_review
// comments: the two alternatives share path and body and differ by
// position versus line, each forbidden by the other.
const reviewCommentSchema = `{"type":"array","items":{"oneOf":[
 {"type":"object","properties":{"path":{"type":"string"},"position":{"type":"number"},"body":{"type":"string"}},"required":["path","position","body"],"additionalProperties":false},
 {"type":"object","properties":{"path":{"type":"string"},"line":{"type":"number"},"body":{"type":"string"}},"required":["path","line","body"],"additionalProperties":false}]}}`

var unionWalkSchemas = []string{
	petSchema,
	reviewCommentSchema,
	// key-discriminated and recursive: a node's first key picks it
	`{"$defs":{"T":{"anyOf":[{"type":"object","properties":{"leaf":{"type":"integer"}},"required":["leaf"],"additionalProperties":false},
	 {"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/T"},"maxItems":2},"name":{"type":"string"}},"required":["kids"],"additionalProperties":false}]}},"$ref":"#/$defs/T"}`,
	// a recursive discriminated tree: the depth bookkeeping holds across
	// the switch from the union to the chosen alternative
	`{"$defs":{"T":{"oneOf":[{"type":"object","properties":{"k":{"const":"leaf"},"v":{"type":"integer"}},"required":["k","v"],"additionalProperties":false},
	 {"type":"object","properties":{"k":{"const":"node"},"kids":{"type":"array","items":{"$ref":"#/$defs/T"},"minItems":1,"maxItems":2}},"required":["k","kids"],"additionalProperties":false}]}},"$ref":"#/$defs/T"}`,
	`{"$defs":{"E":{"type":"object","properties":{"op":{"const":"add"},"args":{"type":"array","items":{"oneOf":[{"$ref":"#/$defs/E"},{"$ref":"#/$defs/L"}]},"maxItems":2}},"required":["op","args"],"additionalProperties":false},
	 "L":{"type":"object","properties":{"op":{"const":"lit"},"v":{"type":"integer"}},"required":["op","v"],"additionalProperties":false}},"$ref":"#/$defs/E"}`,
	`{"type":"array","items":{"oneOf":[{"type":"string","maxLength":3},{"type":"boolean"},{"type":"object","properties":{"a":{"const":0}},"required":["a"]},{"type":"object","properties":{"a":{"const":1},"b":{"type":"null"}},"required":["a","b"]}]},"maxItems":3}`,
}

// Random walks under unions, at two depth limits: no dead end, and every
// document is valid to the independent validator, which checks that
// exactly one oneOf alternative matches.
func TestRandomWalksUnion(t *testing.T) {
	m, tok, endSet, walks := walkFixture(t, 25, 5)
	shallow := smallOptions
	shallow.MaxKeyBytes = 10
	shallow.MaxDepth = 5
	deeper := shallow
	deeper.MaxDepth = 8
	for oi, opts := range []Options{shallow, deeper} {
		for si, schemaJSON := range unionWalkSchemas {
			s, err := CompileWithOptions([]byte(schemaJSON), opts)
			if err != nil {
				t.Fatalf("schema %d: %v", si, err)
			}
			for w := 0; w < walks; w++ {
				rng := rand.New(rand.NewPCG(uint64(si*100+w), uint64(oi)))
				doc := randomWalk(t, m, tok, s, rng, endSet, w%5 == 0)
				if w < 2 {
					t.Logf("depth %d schema %d walk %d: %s", opts.MaxDepth, si, w, doc)
				}
				checkDocument(t, schemaJSON, doc)
			}
		}
	}
}

// An alternative naming a $ref target that is still compiling (a
// recursive model's optional self-reference) is told apart once the target
// has compiled, so the recursive branch can be written (it could not when
// unions were told apart as they compiled).
func TestRecursiveUnionAlternative(t *testing.T) {
	for _, tc := range []struct{ schema, doc string }{
		{`{"$defs":{"N":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/N"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/N"}`,
			`{"v":1,"next":{"v":2,"next":null}}`},
		{`{"$defs":{"E":{"type":"object","properties":{"op":{"const":"add"},"args":{"type":"array","items":{"oneOf":[{"$ref":"#/$defs/E"},{"$ref":"#/$defs/L"}]}}},"required":["op","args"]},
		   "L":{"type":"object","properties":{"op":{"const":"lit"},"v":{"type":"number"}},"required":["op","v"]}},"$ref":"#/$defs/E"}`,
			`{"op":"add","args":[{"op":"lit","v":1},{"op":"add","args":[]}]}`},
		{`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"null"}]}},"enum":[{"a":"x"},{"a":1}]}`, `{"a":"x"}`},
	} {
		s := mustCompile(t, tc.schema)
		if !accepts(s, []byte(tc.doc)) {
			t.Errorf("%s refuses %s", tc.schema, tc.doc)
			continue
		}
		checkDocument(t, tc.schema, []byte(tc.doc))
	}
	_, err := Compile(json.RawMessage(`{"$defs":{"N":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/N"},{"type":"null"}]}},"enum":[{"next":null}]}},"$ref":"#/$defs/N"}`))
	checkCompile(t, err, "enum", "enum beside an anyOf that refers back to a schema being compiled")
}

// Past nvmai's automaton limits a schema is unsupported (not wrong), so a
// client can tell the two apart; a pattern no string matches is wrong.
func TestLimitsAreUnsupported(t *testing.T) {
	for _, tc := range []struct {
		schema      string
		unsupported bool
	}{
		{`{"type":"string","pattern":".{100}x.{100}"}`, true},
		{`{"type":"integer","multipleOf":999}`, true},
		{`{"type":"string","pattern":"(a)\\1"}`, true},
		{`{"type":"string","format":"int32"}`, true},
		{`{"type":"string","pattern":"^a{5}$","maxLength":4}`, false},
		{`{"type":"string","pattern":"("}`, false},
		{`{"type":"integer","multipleOf":0}`, false},
	} {
		_, err := Compile(json.RawMessage(tc.schema))
		var se *SchemaError
		if !errors.As(err, &se) || se.Unsupported() != tc.unsupported {
			t.Errorf("%s: %v, want Unsupported() = %v", tc.schema, err, tc.unsupported)
		}
	}
}

// Names listed twice in required or type make a schema the meta-schema
// (and so the validators clients use) refuses; nvmai refuses it too.
func TestCompileDuplicateNames(t *testing.T) {
	_, err := Compile(json.RawMessage(`{"properties":{"0":{}},"required":["1","1"]}`))
	checkCompile(t, err, "required", `required lists "1" twice at /required`)
	_, err = Compile(json.RawMessage(`{"type":["string","null","string"]}`))
	checkCompile(t, err, "type", `type lists "string" twice at /type`)
}
