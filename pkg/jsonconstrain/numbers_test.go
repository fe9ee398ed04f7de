package jsonconstrain

import (
	"encoding/json"
	"math/big"
	"regexp"
	"strings"
	"testing"
)

var plainNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)

// inBounds is the oracle: exact rational comparison with each bound.
func inBounds(t *testing.T, schema map[string]any, s string) bool {
	v, ok := new(big.Rat).SetString(s)
	if !ok {
		t.Fatalf("oracle cannot parse %q", s)
	}
	return checkBounds(schema, json.Number(s)) == nil && (schema["type"] != "integer" || v.IsInt())
}

// Every string over a small alphabet, up to MaxNumberBytes long, is
// accepted as a whole number exactly when it is a JSON number (written
// without exponent) within the bounds; and every prefix the automaton
// accepts can still be completed to one.
func TestBoundsExhaustive(t *testing.T) {
	tests := []struct {
		schema   string
		alphabet string
		maxBytes int
	}{
		{`{"type":"integer","minimum":0}`, "0123456789-", 4},
		{`{"type":"integer","minimum":-12,"maximum":7}`, "0123456789-", 4},
		{`{"type":"integer","exclusiveMinimum":-100,"exclusiveMaximum":-3}`, "0123456789-", 4},
		{`{"type":"integer","minimum":5,"exclusiveMinimum":true,"maximum":250}`, "0123456789-", 4},
		{`{"type":"integer","minimum":1.5,"maximum":99.5}`, "0123456789-.", 4},
		{`{"type":"integer","maximum":0,"exclusiveMaximum":-1e1}`, "0123456789-", 4},
		{`{"type":"integer","minimum":0,"maximum":0}`, "0123456789-", 3},
		{`{"type":"number","minimum":0,"maximum":1}`, "01259-.", 5},
		{`{"type":"number","exclusiveMinimum":-2.05,"maximum":0.25}`, "01259-.", 5},
		{`{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":0.5}`, "01259-.", 5},
		{`{"type":"number","minimum":-1.5,"maximum":-0.01}`, "01259-.", 5},
		{`{"type":"number","minimum":12.5}`, "01259-.", 4},
		{`{"type":["number","string"],"maximum":-0.5}`, "01259-.", 4},
	}
	for _, tc := range tests {
		t.Run(tc.schema, func(t *testing.T) {
			checkExhaustive(t, tc.schema, tc.alphabet, tc.maxBytes, func(schema map[string]any, str string) bool {
				// An integer is written without a fraction ("10", not "10.0").
				integerForm := schema["type"] != "integer" || !strings.Contains(str, ".")
				return plainNumber.MatchString(str) && integerForm && inBounds(t, schema, str)
			})
		})
	}
}

// checkExhaustive compiles schemaJSON for numbers of at most maxBytes bytes
// and reads every string over alphabet up to that length: each is accepted
// as a whole document exactly when want says, one at least is, and every
// prefix accepted can still be completed to one.
func checkExhaustive(t *testing.T, schemaJSON, alphabet string, maxBytes int, want func(schema map[string]any, str string) bool) {
	t.Helper()
	opts := DefaultOptions
	opts.MaxNumberBytes = maxBytes
	s, err := CompileWithOptions([]byte(schemaJSON), opts)
	if err != nil {
		t.Fatal(err)
	}
	schema := decode(t, []byte(schemaJSON)).(map[string]any)
	var all []string
	var gen func(prefix string)
	gen = func(prefix string) {
		if prefix != "" {
			all = append(all, prefix)
		}
		if len(prefix) == maxBytes {
			return
		}
		for _, c := range alphabet {
			gen(prefix + string(c))
		}
	}
	gen("")
	complete := map[string]bool{}
	for _, str := range all {
		st := s.Start()
		got := st.AcceptBytes([]byte(str)) && st.Done()
		if w := want(schema, str); got != w {
			t.Fatalf("%q: accepted %v, want %v", str, got, w)
		}
		if got {
			complete[str] = true
		}
	}
	if len(complete) == 0 {
		t.Fatal("nothing accepted")
	}
	for _, str := range all {
		if st := s.Start(); !st.AcceptBytes([]byte(str)) {
			continue
		}
		found := false
		for c := range complete {
			if strings.HasPrefix(c, str) {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("prefix %q accepted but cannot be completed", str)
		}
	}
}

// Bounds at the ends of int64, and far beyond, compare digit by digit.
func TestBoundsLarge(t *testing.T) {
	tests := []struct {
		schema string
		docs   map[string]bool
	}{
		{`{"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807}`, map[string]bool{
			"9223372036854775807": true, "9223372036854775808": false, "-9223372036854775808": true,
			"-9223372036854775809": false, "0": true, "-0": true, "10000000000000000000": false, "007": false,
		}},
		{`{"type":"integer","minimum":100000000000000000000000}`, map[string]bool{
			"100000000000000000000000": true, "99999999999999999999999": false, "1e30": false,
		}},
		{`{"type":"integer","maximum":-5}`, map[string]bool{"-5": true, "-4": false, "-0": false, "5": false, "-12345": true}},
		{`{"type":"number","minimum":0,"maximum":1}`, map[string]bool{"0.5": true, "1.0": true, "1.01": false, "0.000001": true, "5e-1": false, "-0.0": true, "-0.1": false}},
	}
	for _, tc := range tests {
		s := mustCompile(t, tc.schema)
		for doc, want := range tc.docs {
			st := s.Start()
			if got := st.AcceptBytes([]byte(doc)) && st.Done(); got != want {
				t.Errorf("%s: %s accepted %v, want %v", tc.schema, doc, got, want)
			}
		}
	}
}

func TestCompileBounds(t *testing.T) {
	tests := []struct {
		name, schema, keyword, want string
	}{
		{"integer range", `{"type":"integer","minimum":0,"maximum":100}`, "", ""},
		{"draft 4 exclusive", `{"type":"integer","minimum":0,"exclusiveMinimum":true}`, "", ""},
		{"bounds on a string are no constraint", `{"type":"string","minimum":3}`, "", ""},
		{"bounds beside enum filter it", `{"enum":[1,5,9],"minimum":4,"maximum":6}`, "", ""},
		{"empty range", `{"type":"integer","minimum":5,"maximum":4}`, "minimum", "no integer of at most 32 bytes"},
		{"empty exclusive range", `{"type":"integer","exclusiveMinimum":4,"exclusiveMaximum":5}`, "exclusiveMinimum", "no integer"},
		{"bound not a number", `{"minimum":"3"}`, "minimum", "minimum must be a number"},
		{"draft 4 boolean alone", `{"exclusiveMaximum":true}`, "exclusiveMaximum", "needs maximum beside it"},
		{"huge exponent", `{"maximum":1e999999}`, "maximum", "maximum must be a number"},
		{"too many digits", `{"type":"number","minimum":1e-70}`, "minimum", "more than 64 decimal digits"},
		{"out of writable range", `{"type":"integer","minimum":1e40}`, "minimum", "no integer of at most 32 bytes"},
		{"enum outside bounds", `{"enum":[1,2],"minimum":3}`, "enum", "no enum or const value satisfies"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(json.RawMessage(tc.schema))
			checkCompile(t, err, tc.keyword, tc.want)
		})
	}
}
