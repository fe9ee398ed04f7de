// Package toolconstrain makes tool calls that cannot come out malformed: a
// token-level constraint that leaves free text (and reasoning) alone and,
// once the model opens a call with <tool_call>, allows only what makes a
// well-formed Qwen3-Coder call of a declared tool: the exact layout the
// chat template writes and pkg/chatparse reads,
//
//	<tool_call>
//	<function=NAME>
//	<parameter=P>
//	VALUE
//	</parameter>
//	</function>
//	</tool_call>
//
// with NAME one of the tools, each P a declared parameter not yet written,
// every required one before </function>, and each VALUE fitting its
// schema: raw text for strings (an enum picks one of its values), JSON
// through pkg/jsonconstrain for numbers, booleans, arrays and objects. A
// parameter schema the constraint cannot enforce leaves that value free
// (see Grammar.Fallbacks). docs/structured-output.md describes it.
package toolconstrain

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nvmai/nvmai/pkg/chatparse"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
)

// Tool is a declared function: its name and the JSON schema of its
// parameters (an object schema; its properties are the parameters).
type Tool struct {
	Name       string
	Parameters json.RawMessage
}

// valueKind is how a parameter's value is constrained.
type valueKind uint8

const (
	vRaw  valueKind = iota // any text without a closing tag (strings, and the fallback)
	vEnum                  // one of the enum's strings, raw
	vJSON                  // a JSON document of the schema
)

type param struct {
	name   string
	kind   valueKind
	enum   []string // vEnum: each value + closeParam, sorted
	schema *jsonconstrain.Schema
	// vRaw: bounds on the value's characters (maxLen -1: none); a
	// bounded value must be valid UTF-8, so characters are code points
	// as JSON Schema counts them.
	minLen, maxLen int32
	// vRaw with a pattern or format: the value's automaton, which then
	// holds the length bounds too (minLen 0, maxLen -1 above).
	pat *rawPattern
}

func (p *param) bounded() bool { return p.minLen > 0 || p.maxLen >= 0 }

type tool struct {
	name     string
	params   []param  // sorted by name
	lits     []string // params[i].name + ">\n"
	required uint64   // bit i: params[i] is required
}

// Grammar is the compiled tool list of a request, immutable and shared by
// the requests that send the same tools.
type Grammar struct {
	tools []tool   // sorted by name
	lits  []string // tools[i].name + ">\n"
	// Fallbacks name the parameters whose values are left free because
	// the constraint cannot enforce their schema, each with the reason
	// ("tool.param: keyword \"pattern\""), for the server's log.
	Fallbacks []string
}

func rawParam() param { return param{kind: vRaw, maxLen: -1} }

// valueOptions bound JSON parameter values more loosely than a
// response_format document: a tool argument's string may be a whole file
// (a string without maxLength would otherwise be cut at 4096 characters),
// and a model may indent the JSON it writes.
var valueOptions = func() jsonconstrain.Options {
	o := jsonconstrain.DefaultOptions
	o.MaxStringChars = 1 << 20
	o.MaxItems = 1 << 16
	o.MaxWhitespace = 32
	return o
}()

// maxParams bounds a tool's parameters (the written ones are bits of a
// uint64).
const maxParams = 64

// The markup of the format, as the template writes it.
const (
	openCall   = "<tool_call>"
	closeParam = "\n</parameter>\n"
)

// annotations constrain nothing.
var annotations = map[string]bool{
	"title": true, "description": true, "$schema": true, "$id": true,
	"$comment": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true,
}

var (
	cacheMu sync.Mutex
	cache   = map[[32]byte]*Grammar{}
)

// maxCached bounds the grammar cache; an agent sends the same tools every
// turn, so a few entries serve it.
const maxCached = 64

// Compile compiles a tool list, or returns the grammar compiled before for
// the same list. Tools whose name chatparse would not read as one (empty,
// or with whitespace, quotes, braces or angle brackets) are left out, as
// are such parameter names. It fails only when no tool is left or a tool
// has more than 64 parameters.
func Compile(tools []Tool) (*Grammar, error) {
	h := sha256.New()
	for _, t := range tools {
		fmt.Fprintf(h, "%d:%s%d:", len(t.Name), t.Name, len(t.Parameters))
		h.Write(t.Parameters)
	}
	var key [32]byte
	h.Sum(key[:0])
	cacheMu.Lock()
	g := cache[key]
	cacheMu.Unlock()
	if g != nil {
		return g, nil
	}
	g, err := compile(tools)
	if err != nil {
		return nil, err
	}
	cacheMu.Lock()
	if len(cache) >= maxCached {
		clear(cache)
	}
	cache[key] = g
	cacheMu.Unlock()
	return g, nil
}

func compile(tools []Tool) (*Grammar, error) {
	g := &Grammar{}
	seen := map[string]bool{}
	for _, t := range tools {
		if !validName(t.Name) || seen[t.Name] {
			continue
		}
		seen[t.Name] = true
		tl, err := compileTool(t, g)
		if err != nil {
			return nil, err
		}
		g.tools = append(g.tools, tl)
	}
	if len(g.tools) == 0 {
		return nil, fmt.Errorf("toolconstrain: no tool has a name the call format can carry")
	}
	sort.Slice(g.tools, func(i, j int) bool { return g.tools[i].name < g.tools[j].name })
	for _, t := range g.tools {
		g.lits = append(g.lits, t.name+">\n")
	}
	return g, nil
}

// validName mirrors chatparse's name rule: what it reads between
// "<function=" or "<parameter=" and '>'.
func validName(s string) bool {
	return s != "" && len(s) <= 256 && !strings.ContainsAny(s, " \t\r\n{}<>\"'")
}

func compileTool(t Tool, g *Grammar) (tool, error) {
	tl := tool{name: t.Name}
	var root struct {
		Properties  map[string]json.RawMessage `json:"properties"`
		Required    []string                   `json:"required"`
		Defs        json.RawMessage            `json:"$defs"`
		Definitions json.RawMessage            `json:"definitions"`
	}
	if len(t.Parameters) > 0 && json.Unmarshal(t.Parameters, &root) != nil {
		root.Properties = nil // not an object schema: no parameters
	}
	var rootDoc any
	dec := json.NewDecoder(bytes.NewReader(t.Parameters))
	dec.UseNumber()
	_ = dec.Decode(&rootDoc)
	names := make([]string, 0, len(root.Properties))
	for n := range root.Properties {
		if validName(n) {
			names = append(names, n)
		}
	}
	if len(names) > maxParams {
		return tl, fmt.Errorf("toolconstrain: tool %q has %d parameters, more than the %d the constraint tracks", t.Name, len(names), maxParams)
	}
	slices.Sort(names)
	for i, n := range names {
		p, why := classify(root.Properties[n], rootDoc)
		p.name = n
		if why != "" {
			g.Fallbacks = append(g.Fallbacks, t.Name+"."+n+": "+why)
		}
		tl.params = append(tl.params, p)
		tl.lits = append(tl.lits, n+">\n")
		if slices.Contains(root.Required, n) {
			tl.required |= 1 << i
		}
	}
	return tl, nil
}

// classify decides how a parameter's value is constrained, following how
// chatparse types it (a parameter whose types are all "string" stays the
// raw text; others are decoded as JSON). why, when not "", says why the
// value is left free.
func classify(raw json.RawMessage, root any) (p param, why string) {
	var kw map[string]json.RawMessage
	if json.Unmarshal(raw, &kw) != nil {
		return rawParam(), "" // true, or not a schema: anything goes
	}
	var keys []string
	for k := range kw {
		if !annotations[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	ts := typesOf(kw, 0)
	switch {
	case len(ts) == 0 && len(keys) == 0:
		return rawParam(), "" // no schema: any text
	case ts["string"] && len(ts) == 1:
		return stringParam(kw, keys)
	case ts["string"]:
		// chatparse keeps such a value the raw text as a string (null
		// for "null"), which fits when the string branch is plain and no
		// object or array would be parsed from it.
		if plainScalars(kw, 0) {
			return rawParam(), ""
		}
		return rawParam(), "mixes string with object, array or constrained types, which the raw value format cannot constrain"
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return rawParam(), "not JSON"
	}
	// A $ref points into the tool's parameters schema: give the
	// parameter's schema the definitions it may reference, and inline
	// references to other places in it (a sibling property).
	budget := maxInlined
	m, _ := inlineRefs(doc, root, 0, &budget).(map[string]any)
	if r, ok := root.(map[string]any); ok && m != nil {
		for _, k := range []string{"$defs", "definitions"} {
			if _, has := m[k]; !has && r[k] != nil {
				m[k] = r[k]
			}
		}
		doc = m
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return rawParam(), err.Error()
	}
	s, err := jsonconstrain.CompileWithOptions(b, valueOptions)
	if err != nil {
		return rawParam(), refusal(err)
	}
	return param{kind: vJSON, schema: s}, ""
}

// maxInlined bounds the references inlineRefs replaces in one parameter,
// so that references that branch into themselves cannot blow a schema up.
const maxInlined = 64

// inlineRefs replaces, in the schema v, each $ref into root other than
// its $defs and definitions (which the compiler resolves) by what it
// points to, its own other keywords kept beside, at most *budget of them;
// a reference left (a cycle, or past the budget) makes the compiler
// refuse the schema, and the value is left free.
func inlineRefs(v, root any, depth int, budget *int) any {
	if depth > 8 {
		return v
	}
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = inlineRefs(e, root, depth, budget)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = inlineRefs(e, root, depth, budget)
		}
		ref, _ := x["$ref"].(string)
		if !strings.HasPrefix(ref, "#/") || strings.HasPrefix(ref, "#/$defs/") || strings.HasPrefix(ref, "#/definitions/") || *budget <= 0 {
			return out
		}
		*budget--
		target, ok := pointer(root, ref[1:])
		if !ok {
			return out
		}
		merged, ok := inlineRefs(target, root, depth+1, budget).(map[string]any)
		if !ok {
			return out
		}
		res := make(map[string]any, len(merged)+len(out))
		for k, e := range merged {
			res[k] = e
		}
		for k, e := range out {
			if k != "$ref" {
				res[k] = e
			}
		}
		return res
	}
	return v
}

// pointer resolves an RFC 6901 JSON pointer in v.
func pointer(v any, p string) (any, bool) {
	if p == "" {
		return v, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// refusal names what jsonconstrain refused.
func refusal(err error) string {
	if se, ok := err.(*jsonconstrain.SchemaError); ok {
		var kws []string
		for _, p := range se.Problems {
			if p.Keyword != "" && !slices.Contains(kws, p.Keyword) {
				kws = append(kws, p.Keyword)
			}
		}
		if len(kws) > 0 {
			return fmt.Sprintf("keyword %q not enforced (%s)", strings.Join(kws, `", "`), se.Problems[0])
		}
	}
	return err.Error()
}

// stringParam is a parameter typed string only: raw text, or one of its
// enum (or const) strings.
func stringParam(kw map[string]json.RawMessage, keys []string) (param, string) {
	var vals []json.RawMessage
	var pattern, format string
	p := rawParam()
	for _, k := range keys {
		switch k {
		case "type":
		case "pattern", "format":
			var v string
			if json.Unmarshal(kw[k], &v) != nil {
				return rawParam(), fmt.Sprintf("keyword %q is not a string", k)
			}
			if k == "pattern" {
				pattern = v
			} else {
				format = v
			}
		case "minLength", "maxLength":
			var n int32
			if json.Unmarshal(kw[k], &n) != nil || n < 0 {
				return rawParam(), fmt.Sprintf("keyword %q is not a non-negative integer", k)
			}
			if k == "minLength" {
				p.minLen = n
			} else {
				p.maxLen = n
			}
		case "enum":
			if json.Unmarshal(kw["enum"], &vals) != nil {
				return rawParam(), `keyword "enum" is not an array`
			}
		case "const":
			vals = append(vals, kw["const"])
		default:
			return rawParam(), fmt.Sprintf("keyword %q on a string parameter is not enforced on its raw value", k)
		}
	}
	if p.maxLen >= 0 && p.minLen > p.maxLen {
		return rawParam(), "minLength is over maxLength: no value fits"
	}
	var rs *jsonconstrain.RawString
	if pattern != "" || format != "" {
		var err error
		rs, err = jsonconstrain.CompileRawString(jsonconstrain.RawStringSpec{Pattern: pattern, Format: format, MinLength: int(p.minLen), MaxLength: int(p.maxLen)})
		if err != nil {
			return rawParam(), fmt.Sprintf("%s on a string parameter is not enforced on its raw value: %v", patternKeywords(pattern, format), err)
		}
	}
	if vals == nil {
		if rs != nil {
			pat, err := newRawPattern(rs)
			if err != nil {
				return rawParam(), fmt.Sprintf("%s on a string parameter is not enforced on its raw value: %v", patternKeywords(pattern, format), err)
			}
			p = rawParam()
			p.pat = pat
		}
		return p, ""
	}
	lo, hi := p.minLen, p.maxLen
	p = param{kind: vEnum}
	for _, v := range vals {
		var s string
		if json.Unmarshal(v, &s) != nil {
			continue // null, or a non-string value chatparse would not give back
		}
		if n := int32(utf8.RuneCountInString(s)); n < lo || hi >= 0 && n > hi {
			continue
		}
		if rs != nil && !rawMatches(rs, s) {
			continue
		}
		if strings.Contains(s, "</parameter>") || strings.Contains(s, "<parameter=") || strings.Contains(s, "</function>") || strings.Contains(s, "</tool_call>") {
			continue // would end the value early
		}
		if lit := s + closeParam; !slices.Contains(p.enum, lit) {
			p.enum = append(p.enum, lit)
		}
	}
	if len(p.enum) == 0 {
		return rawParam(), `keyword "enum" has no string value the format can write`
	}
	slices.Sort(p.enum)
	return p, ""
}

// patternKeywords names the keywords a raw string's automaton holds.
func patternKeywords(pattern, format string) string {
	switch {
	case pattern != "" && format != "":
		return `keywords "pattern" and "format"`
	case pattern != "":
		return `keyword "pattern"`
	}
	return `keyword "format"`
}

// rawMatches reports whether s, written raw, is a value of rs.
func rawMatches(rs *jsonconstrain.RawString, s string) bool {
	st := rs.Start()
	for i := 0; i < len(s); i++ {
		if st = rs.Step(st, s[i]); st < 0 {
			return false
		}
	}
	return rs.Accepting(st) && (rs.MaxLength() < 0 || utf8.RuneCountInString(s) <= rs.MaxLength())
}

// plainScalars reports a schema whose values are strings of any kind or
// other scalars (null, booleans, numbers), nothing else constrained: any
// raw text then parses to a value that fits (Optional[str], a
// ["boolean","string"] flag).
func plainScalars(kw map[string]json.RawMessage, depth int) bool {
	if depth > 8 {
		return false
	}
	for k, v := range kw {
		switch {
		case annotations[k]:
		case k == "type":
			var one string
			var many []string
			if json.Unmarshal(v, &one) == nil {
				many = []string{one}
			} else if json.Unmarshal(v, &many) != nil {
				return false
			}
			for _, t := range many {
				switch t {
				case "string", "null", "boolean", "number", "integer":
				default:
					return false
				}
			}
		case k == "anyOf" || k == "oneOf":
			var alts []map[string]json.RawMessage
			if json.Unmarshal(v, &alts) != nil {
				return false
			}
			for _, a := range alts {
				if !plainScalars(a, depth+1) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// typesOf is chatparse's type set of a parameter schema: its type (with the
// aliases chatparse accepts), those of anyOf and oneOf, and for an enum
// without a type, string or number by its values.
func typesOf(kw map[string]json.RawMessage, depth int) map[string]bool {
	ts := map[string]bool{}
	if depth > 8 {
		return ts
	}
	var one string
	var many []string
	if json.Unmarshal(kw["type"], &one) == nil && one != "" {
		many = []string{one}
	} else {
		_ = json.Unmarshal(kw["type"], &many)
	}
	for _, t := range many {
		if c := chatparse.CanonicalType(t); c != "" {
			ts[c] = true
		}
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		var alts []map[string]json.RawMessage
		_ = json.Unmarshal(kw[k], &alts)
		for _, a := range alts {
			for t := range typesOf(a, depth+1) {
				ts[t] = true
			}
		}
	}
	var enum []json.RawMessage
	if len(many) == 0 && json.Unmarshal(kw["enum"], &enum) == nil {
		for _, e := range enum {
			var s string
			if json.Unmarshal(e, &s) == nil {
				ts["string"] = true
			} else if string(e) != "null" {
				ts["number"] = true
			}
		}
	}
	return ts
}

// HasTool reports whether name is one of the grammar's tools.
func (g *Grammar) HasTool(name string) bool { return g.toolIndex(name) >= 0 }

func (g *Grammar) toolIndex(name string) int {
	i := sort.Search(len(g.tools), func(i int) bool { return g.tools[i].name >= name })
	if i < len(g.tools) && g.tools[i].name == name {
		return i
	}
	return -1
}
