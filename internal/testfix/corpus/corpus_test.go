package corpus

import (
	"encoding/json"
	"testing"
)

// The corpus judge asserts formats and refuses what breaks a schema, so a
// generation it accepts is valid.
func TestCorpusValidatorJudges(t *testing.T) {
	for _, tc := range []struct {
		schema, doc string
		ok          bool
	}{
		{`{"type":"string","format":"date"}`, `"2024-02-29"`, true},
		{`{"type":"string","format":"date"}`, `"2023-02-29"`, false},
		{`{"type":"string","format":"uuid"}`, `"123e4567-e89b-12d3-a456-42661417400"`, false},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`, `{"a":1,"b":2}`, false},
		{`{"$defs":{"A":{"type":"array","items":{"$ref":"#/$defs/A"},"maxItems":1}},"$ref":"#/$defs/A"}`, `[[[]]]`, true},
		{`{"type":"object"}`, `{"a":1} {}`, false},
		{`{"type":"string"}`, "\"\xff\"", false},
	} {
		cv, err := NewValidator(json.RawMessage(tc.schema))
		if err != nil {
			t.Fatal(err)
		}
		if err := cv.Check([]byte(tc.doc)); (err == nil) != tc.ok {
			t.Errorf("%s against %s: %v, want ok=%v", tc.doc, tc.schema, err, tc.ok)
		}
	}
}
