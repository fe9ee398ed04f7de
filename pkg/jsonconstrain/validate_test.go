package jsonconstrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validate checks a decoded instance against a decoded schema from the
// JSON Schema semantics of the keywords the package supports, independently
// of the compiler: the tests judge the automaton by it.
func validate(schema, v any) error {
	return validator{root: schema}.check(schema, v)
}

// validator resolves local $refs against the root schema.
type validator struct{ root any }

func (vd validator) check(schema, v any) error {
	switch s := schema.(type) {
	case bool:
		if !s {
			return fmt.Errorf("schema false")
		}
		return nil
	case map[string]any:
		return vd.validateObject(s, v)
	}
	return fmt.Errorf("schema is %T", schema)
}

// resolve follows a local JSON pointer ("#", "#/$defs/A") from the root.
func (vd validator) resolve(ref string) any {
	cur := vd.root
	if ref == "#" {
		return cur
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			i, _ := strconv.Atoi(tok)
			cur = c[i]
		}
	}
	return cur
}

func (vd validator) validateObject(s map[string]any, v any) error {
	if ref, ok := s["$ref"]; ok {
		if err := vd.check(vd.resolve(ref.(string)), v); err != nil {
			return fmt.Errorf("$ref %s: %w", ref, err)
		}
	}
	for i, sub := range asSlice(s["allOf"]) {
		if err := vd.check(sub, v); err != nil {
			return fmt.Errorf("allOf/%d: %w", i, err)
		}
	}
	if t, ok := s["type"]; ok && !typeMatches(t, v) {
		return fmt.Errorf("%v is not of type %v", v, t)
	}
	if c, ok := s["const"]; ok && !jsonEqual(c, v) {
		return fmt.Errorf("%v is not const %v", v, c)
	}
	if e, ok := s["enum"]; ok {
		found := false
		for _, x := range e.([]any) {
			found = found || jsonEqual(x, v)
		}
		if !found {
			return fmt.Errorf("%v is not in enum", v)
		}
	}
	if alts, ok := s["anyOf"]; ok {
		n := 0
		for _, a := range alts.([]any) {
			if vd.check(a, v) == nil {
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("%v matches no anyOf alternative", v)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		return vd.validateProperties(s, x)
	case []any:
		if lo, ok := s["minItems"]; ok && float64(len(x)) < num(lo) {
			return fmt.Errorf("%d items < minItems", len(x))
		}
		if hi, ok := s["maxItems"]; ok && float64(len(x)) > num(hi) {
			return fmt.Errorf("%d items > maxItems", len(x))
		}
		prefix := asSlice(s["prefixItems"])
		for i, e := range x {
			sub, ok := s["items"]
			if i < len(prefix) {
				sub = prefix[i]
			} else if !ok {
				continue
			}
			if err := vd.check(sub, e); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case string:
		n := float64(utf8.RuneCountInString(x))
		if lo, ok := s["minLength"]; ok && n < num(lo) {
			return fmt.Errorf("%q shorter than minLength", x)
		}
		if hi, ok := s["maxLength"]; ok && n > num(hi) {
			return fmt.Errorf("%q longer than maxLength", x)
		}
	case json.Number:
		return checkBounds(s, x)
	}
	return nil
}

// checkBounds compares exactly, in rationals, so that no float rounding
// hides an instance just outside a bound.
func checkBounds(s map[string]any, x json.Number) error {
	val, ok := new(big.Rat).SetString(string(x))
	if !ok {
		return fmt.Errorf("number %s does not parse", x)
	}
	bound := func(key string) (*big.Rat, bool) {
		b, ok := s[key].(json.Number)
		if !ok {
			return nil, false
		}
		r, ok := new(big.Rat).SetString(string(b))
		return r, ok
	}
	exclusive := func(key string) bool { b, _ := s[key].(bool); return b }
	if lo, ok := bound("minimum"); ok {
		if c := val.Cmp(lo); c < 0 || c == 0 && exclusive("exclusiveMinimum") {
			return fmt.Errorf("%s under minimum %s", x, lo.RatString())
		}
	}
	if hi, ok := bound("maximum"); ok {
		if c := val.Cmp(hi); c > 0 || c == 0 && exclusive("exclusiveMaximum") {
			return fmt.Errorf("%s over maximum %s", x, hi.RatString())
		}
	}
	if lo, ok := bound("exclusiveMinimum"); ok && val.Cmp(lo) <= 0 {
		return fmt.Errorf("%s not over exclusiveMinimum %s", x, lo.RatString())
	}
	if hi, ok := bound("exclusiveMaximum"); ok && val.Cmp(hi) >= 0 {
		return fmt.Errorf("%s not under exclusiveMaximum %s", x, hi.RatString())
	}
	return nil
}

func (vd validator) validateProperties(s map[string]any, x map[string]any) error {
	props, _ := s["properties"].(map[string]any)
	for _, r := range asSlice(s["required"]) {
		if _, ok := x[r.(string)]; !ok {
			return fmt.Errorf("required %q missing", r)
		}
	}
	for k, e := range x {
		sub, known := props[k]
		if !known {
			sub, known = s["additionalProperties"]
			if !known {
				sub = true
			}
		}
		if err := vd.check(sub, e); err != nil {
			return fmt.Errorf(".%s: %w", k, err)
		}
	}
	return nil
}

func num(v any) float64 {
	f, err := v.(json.Number).Float64()
	if err != nil {
		panic(err)
	}
	return f
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func typeMatches(t, v any) bool {
	if list, ok := t.([]any); ok {
		for _, one := range list {
			if typeMatches(one, v) {
				return true
			}
		}
		return false
	}
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case json.Number:
		f, ok := new(big.Float).SetString(string(x))
		return t == "number" || t == "integer" && ok && f.IsInt()
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

// jsonEqual is JSON Schema equality: numbers by value (1 == 1.0), objects
// regardless of key order.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func decode(t interface{ Fatalf(string, ...any) }, doc []byte) any {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("document %q does not parse: %v", doc, err)
	}
	if dec.More() {
		t.Fatalf("document %q has trailing data", doc)
	}
	return v
}

// checkDocument fails unless doc parses, is valid UTF-8 and validates.
func checkDocument(t interface{ Fatalf(string, ...any) }, schemaJSON string, doc []byte) {
	if !utf8.Valid(doc) {
		t.Fatalf("document %q is not valid UTF-8", doc)
	}
	v := decode(t, doc)
	var schema any = map[string]any{"type": "object"} // json_object mode
	if schemaJSON != "" {
		schema = decode(t, []byte(schemaJSON))
	}
	if err := validate(schema, v); err != nil {
		t.Fatalf("document %s does not validate against %s: %v", doc, schemaJSON, err)
	}
	if err := validateIndependently(schema, v); err != nil {
		t.Fatalf("document %s does not validate against %s by santhosh-tekuri/jsonschema: %v", doc, schemaJSON, err)
	}
}

// validateIndependently checks v against schema with a maintained JSON
// Schema library (issue #40's acceptance asks for one beside the
// hand-written validator above, which is written from the same reading of
// the specification as the compiler). Draft 2020-12, else draft 4 for a
// schema that only draft 4 accepts (boolean exclusiveMinimum/Maximum).
func validateIndependently(schema, v any) error {
	var firstErr error
	for _, draft := range []*jsonschema.Draft{jsonschema.Draft2020, jsonschema.Draft4} {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(draft)
		c.AssertFormat() // format is only an annotation unless asserted
		if err := c.AddResource("schema.json", schema); err != nil {
			return err
		}
		sch, err := c.Compile("schema.json")
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		return sch.Validate(v)
	}
	return fmt.Errorf("the schema does not compile: %w", firstErr)
}

// The independent validator judges: it refuses what breaks a schema, in
// both drafts checkDocument tries, so a walk it accepts is valid.
func TestIndependentValidatorJudges(t *testing.T) {
	for _, tc := range []struct {
		schema, doc string
		ok          bool
	}{
		{`{"type":"integer","minimum":3}`, `3`, true},
		{`{"type":"integer","minimum":3}`, `2`, false},
		{`{"type":"number","maximum":1,"exclusiveMaximum":true}`, `1`, false}, // draft 4's boolean form
		{`{"type":"number","maximum":1,"exclusiveMaximum":true}`, `0.5`, true},
		{`{"$defs":{"P":{"type":"object","properties":{"n":{"$ref":"#/$defs/P"}},"additionalProperties":false}},"$ref":"#/$defs/P"}`, `{"n":{"n":{}}}`, true},
		{`{"$defs":{"P":{"type":"object","properties":{"n":{"$ref":"#/$defs/P"}},"additionalProperties":false}},"$ref":"#/$defs/P"}`, `{"n":{"m":1}}`, false},
		{`{"type":"array","prefixItems":[{"type":"string"}],"items":false}`, `["a",1]`, false},
		{`{"allOf":[{"type":"object","required":["a"]},{"required":["b"]}]}`, `{"a":1}`, false},
	} {
		err := validateIndependently(decode(t, []byte(tc.schema)), decode(t, []byte(tc.doc)))
		if (err == nil) != tc.ok {
			t.Errorf("%s against %s: %v, want ok=%v", tc.doc, tc.schema, err, tc.ok)
		}
	}
}
