package jsonconstrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"reflect"
	"unicode/utf8"
)

// validate checks a decoded instance against a decoded schema from the
// JSON Schema semantics of the keywords the package supports, independently
// of the compiler: the tests judge the automaton by it.
func validate(schema, v any) error {
	switch s := schema.(type) {
	case bool:
		if !s {
			return fmt.Errorf("schema false")
		}
		return nil
	case map[string]any:
		return validateObject(s, v)
	}
	return fmt.Errorf("schema is %T", schema)
}

func validateObject(s map[string]any, v any) error {
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
			if validate(a, v) == nil {
				n++
			}
		}
		if n == 0 {
			return fmt.Errorf("%v matches no anyOf alternative", v)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		return validateProperties(s, x)
	case []any:
		if lo, ok := s["minItems"]; ok && float64(len(x)) < num(lo) {
			return fmt.Errorf("%d items < minItems", len(x))
		}
		if hi, ok := s["maxItems"]; ok && float64(len(x)) > num(hi) {
			return fmt.Errorf("%d items > maxItems", len(x))
		}
		if items, ok := s["items"]; ok {
			for i, e := range x {
				if err := validate(items, e); err != nil {
					return fmt.Errorf("[%d]: %w", i, err)
				}
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
	}
	return nil
}

func validateProperties(s map[string]any, x map[string]any) error {
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
		if err := validate(sub, e); err != nil {
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

func jsonEqual(a, b any) bool { return reflect.DeepEqual(a, b) }

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
}
