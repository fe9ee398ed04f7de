package chatparse

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// typeSet is the JSON-schema types a parameter accepts; nil when unknown
// (no schema for the tool or the parameter).
type typeSet map[string]bool

func (t typeSet) stringOnly() bool { return len(t) == 1 && t["string"] }

func (t typeSet) any(names ...string) bool {
	for _, n := range names {
		if t[n] {
			return true
		}
	}
	return false
}

// toolSchema is a tool's parameters and their types; params is nil when the
// schema lists none (then any parameter name is accepted).
type toolSchema struct {
	params map[string]typeSet
}

type schemaNode struct {
	Type       json.RawMessage            `json:"type"`
	AnyOf      []schemaNode               `json:"anyOf"`
	OneOf      []schemaNode               `json:"oneOf"`
	Enum       []json.RawMessage          `json:"enum"`
	Properties map[string]json.RawMessage `json:"properties"`
}

func schemas(tools []Tool) map[string]toolSchema {
	out := map[string]toolSchema{}
	for _, t := range tools {
		var root schemaNode
		if json.Unmarshal(t.Parameters, &root) != nil || len(root.Properties) == 0 {
			out[t.Name] = toolSchema{}
			continue
		}
		params := map[string]typeSet{}
		for name, raw := range root.Properties {
			var n schemaNode
			if json.Unmarshal(raw, &n) != nil {
				params[name] = nil
				continue
			}
			ts := typeSet{}
			n.collect(ts, 0)
			if len(ts) == 0 {
				ts = nil
			}
			params[name] = ts
		}
		out[t.Name] = toolSchema{params: params}
	}
	return out
}

// collect adds the node's types, with the type-name aliases the servers
// that parse this dialect accept (vLLM, mlx-lm, ollama).
func (n schemaNode) collect(ts typeSet, depth int) {
	if depth > 8 {
		return
	}
	var one string
	var many []string
	if json.Unmarshal(n.Type, &one) == nil && one != "" {
		many = []string{one}
	} else {
		_ = json.Unmarshal(n.Type, &many)
	}
	for _, t := range many {
		if c := CanonicalType(t); c != "" {
			ts[c] = true
		}
	}
	for _, sub := range append(n.AnyOf, n.OneOf...) {
		sub.collect(ts, depth+1)
	}
	if len(many) == 0 && len(n.Enum) > 0 {
		for _, e := range n.Enum {
			var s string
			if json.Unmarshal(e, &s) == nil {
				ts["string"] = true
			} else if string(e) != "null" {
				ts["number"] = true
			}
		}
	}
}

// CanonicalType is the JSON-schema type a type name stands for, with the
// aliases (str, int, float, bool, dict, list…) the servers that parse this
// dialect accept, or "" for none; toolconstrain types parameters by it too.
func CanonicalType(t string) string {
	t = strings.ToLower(strings.TrimSpace(t))
	switch {
	case t == "string", t == "str", t == "text", t == "varchar", t == "char", t == "enum":
		return "string"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"), t == "long", t == "short":
		return "integer"
	case strings.HasPrefix(t, "num"), strings.HasPrefix(t, "float"), t == "double":
		return "number"
	case strings.HasPrefix(t, "bool"):
		return "boolean"
	case t == "object", t == "dict", t == "map":
		return "object"
	case t == "array", t == "list", t == "tuple":
		return "array"
	case t == "null", t == "none":
		return "null"
	}
	return ""
}

// coerce turns a parameter's text into its JSON value. It never fails: text
// that does not fit the type stays a string.
func coerce(v string, ts typeSet) string {
	t := strings.TrimSpace(v)
	switch {
	case ts.stringOnly():
		return jsonString(v)
	case ts == nil: // unknown: JSON if it is JSON
		if j, ok := compactJSON(t); ok {
			return j
		}
		return jsonString(v)
	case ts["string"]:
		if ts["null"] && (t == "null" || t == "None") {
			return "null"
		}
		if ts.any("object", "array") && t != "" && (t[0] == '{' || t[0] == '[') {
			if j, ok := literal(t); ok {
				return j
			}
		}
		return jsonString(v)
	}
	switch strings.ToLower(t) {
	case "null", "none":
		return "null"
	case "true", "false":
		if ts["boolean"] {
			return strings.ToLower(t)
		}
	}
	j, ok := literal(t)
	if !ok {
		return jsonString(v)
	}
	if ts["integer"] && !ts["number"] {
		j = integral(j)
	}
	return j
}

// literal decodes JSON, else a Python literal (what Qwen3.5-trained models
// write: True, None, {'a': 1}), into compact JSON.
func literal(t string) (string, bool) {
	if j, ok := compactJSON(t); ok {
		return j, true
	}
	return pythonLiteral(t)
}

func compactJSON(t string) (string, bool) {
	if t == "" || !json.Valid([]byte(t)) {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, []byte(t)) != nil {
		return "", false
	}
	return b.String(), true
}

// integral writes an integral float (5.0, 1e3) as an integer.
func integral(j string) string {
	if !strings.ContainsAny(j, ".eE") {
		return j
	}
	f, err := strconv.ParseFloat(j, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
		return j
	}
	return strconv.FormatInt(int64(f), 10)
}

func jsonString(s string) string { return `"` + jsonStringBody(s) + `"` }

// jsonStringBody is s escaped for the inside of a JSON string. Escaping
// pieces of a string one by one gives the escaping of the whole (pieces are
// cut between characters), so string values can stream. Invalid UTF-8
// becomes U+FFFD, byte by byte, as encoding/json does.
func jsonStringBody(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			b.WriteByte(c)
			i++
			continue
		}
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			}
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\u2028' || r == '\u2029': // valid JSON, but not JavaScript
			b.WriteString(`\u202`)
			b.WriteByte(hexDigits[r&0xf])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

const hexDigits = "0123456789abcdef"
