package jsonconstrain

import (
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// isMultiple is the oracle: v / m is an integer, in exact rationals.
func isMultiple(t *testing.T, v, m string) bool {
	x, ok1 := new(big.Rat).SetString(v)
	d, ok2 := new(big.Rat).SetString(m)
	if !ok1 || !ok2 {
		t.Fatalf("oracle cannot parse %q / %q", v, m)
	}
	return new(big.Rat).Quo(x, d).IsInt()
}

// Every string over a small alphabet is accepted as a whole number exactly
// when it is a plain JSON number within the bounds and a multiple of
// multipleOf; every accepted prefix can still be completed.
func TestMultipleOfExhaustive(t *testing.T) {
	tests := []struct {
		schema, multiple string
		alphabet         string
		maxBytes         int
	}{
		{`{"type":"integer","multipleOf":3}`, "3", "0123456789-", 4},
		{`{"type":"integer","multipleOf":7,"minimum":-30,"maximum":50}`, "7", "0123456789-", 4},
		{`{"type":"integer","multipleOf":1000}`, "1000", "0159-", 5},
		{`{"type":"number","multipleOf":5}`, "5", "0159-.", 4},
		{`{"type":"number","multipleOf":0.25,"minimum":-1,"maximum":2}`, "0.25", "01257-.", 5},
		{`{"type":"number","multipleOf":0.1}`, "0.1", "0159-.", 5},
		{`{"type":"number","multipleOf":1.5e-1,"exclusiveMaximum":1}`, "0.15", "01356-.", 5},
		{`{"type":"integer","multipleOf":2.5}`, "2.5", "0123456789-", 3},
	}
	for _, tc := range tests {
		t.Run(tc.schema, func(t *testing.T) {
			integerMultiple := !strings.Contains(tc.multiple, ".")
			checkExhaustive(t, tc.schema, tc.alphabet, tc.maxBytes, func(schema map[string]any, str string) bool {
				// Integers, and multiples of an integer, are written as integers.
				integerForm := (schema["type"] != "integer" && !integerMultiple) || !strings.Contains(str, ".")
				return plainNumber.MatchString(str) && integerForm && inBounds(t, schema, str) && isMultiple(t, str, tc.multiple)
			})
		})
	}
}

// multipleOf refusals name the keyword; values it cannot apply to pass.
func TestCompileMultipleOf(t *testing.T) {
	tests := []struct {
		name, schema, keyword, want string
	}{
		{"zero", `{"type":"integer","multipleOf":0}`, "multipleOf", "multipleOf must be a number greater than 0"},
		{"negative", `{"type":"integer","multipleOf":-2}`, "multipleOf", "greater than 0"},
		{"not a number", `{"type":"integer","multipleOf":"2"}`, "multipleOf", "greater than 0"},
		{"divisor too large", `{"type":"integer","multipleOf":1001}`, "multipleOf", `unsupported schema keyword "multipleOf": 1001 has the digits 1001, over nvmai's limit of 1000`},
		{"too many decimals", `{"type":"number","multipleOf":1e-17}`, "multipleOf", `more than 16 decimals`},
		{"decimal digits too large", `{"type":"number","multipleOf":0.1234}`, "multipleOf", `has the digits 1234`},
		{"no multiple in bounds", `{"type":"integer","multipleOf":10,"minimum":1,"maximum":9}`, "minimum", "no integer of at most 32 bytes (written without an exponent) lies within the bounds and is a multiple of multipleOf"},
		{"too many states", `{"type":"integer","multipleOf":999}`, "multipleOf", "needs more than 8192 states"},
		{"on strings", `{"type":"string","multipleOf":3}`, "", ""},
		{"in allOf", `{"allOf":[{"type":"integer","multipleOf":4},{"multipleOf":6}]}`, "", ""},
		{"decimal in allOf", `{"allOf":[{"type":"number","multipleOf":0.5},{"multipleOf":0.2}]}`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(json.RawMessage(tc.schema))
			checkCompile(t, err, tc.keyword, tc.want)
		})
	}
	for _, tc := range []struct {
		schema  string
		yes, no []string
	}{
		{`{"allOf":[{"type":"integer","multipleOf":4},{"multipleOf":6}]}`, []string{"12", "-24", "0"}, []string{"4", "6", "18"}},
		{`{"allOf":[{"type":"number","multipleOf":0.5},{"multipleOf":0.2}]}`, []string{"1", "2", "3"}, []string{"0.5", "0.2", "1.5", "3.0"}}, // lcm 1: written as integers
	} {
		s := mustCompile(t, tc.schema)
		for _, v := range tc.yes {
			if !accepts(s, []byte(v)) {
				t.Errorf("%s refuses %s", tc.schema, v)
			} else {
				checkDocument(t, tc.schema, []byte(v))
			}
		}
		for _, v := range tc.no {
			if accepts(s, []byte(v)) {
				t.Errorf("%s accepts %s", tc.schema, v)
			}
		}
	}
}

// Random walks: multiples by the independent validator, across seeds.
func TestRandomWalksMultipleOf(t *testing.T) {
	m, tok, endSet, walks := walkFixture(t, 20, 4)
	schema := `{"type":"array","items":{"anyOf":[{"type":"integer","multipleOf":7},{"type":"string","maxLength":1}]},"maxItems":3}`
	schema2 := `{"type":"object","properties":{"p":{"type":"number","multipleOf":0.05,"minimum":0,"maximum":100}},"required":["p"]}`
	for si, sch := range []string{schema, schema2} {
		s, err := CompileWithOptions([]byte(sch), smallOptions)
		if err != nil {
			t.Fatal(err)
		}
		for w := 0; w < walks; w++ {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(70+si)))
			doc := randomWalk(t, m, tok, s, rng, endSet, w%5 == 0)
			if w < 2 {
				t.Logf("schema %d walk %d: %s", si, w, doc)
			}
			checkDocument(t, sch, doc)
		}
	}
}
