// Package jsonconstrain constrains generation to JSON: a byte-level
// automaton that accepts exactly the prefixes of valid documents (any JSON
// object, or an instance of a schema in a documented subset of JSON Schema),
// and a masker that turns the automaton's state into the set of vocabulary
// tokens the sampler may choose next. docs/structured-output.md describes the
// subset, the limits and the cost.
package jsonconstrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
)

// Options bound what a document may contain, so that every document the
// automaton accepts is finite and a model cannot loop forever inside one.
// Schema keywords can only tighten these bounds.
type Options struct {
	MaxDepth            int // nesting of objects and arrays
	MaxStringChars      int // characters in a string value without maxLength
	MaxKeyBytes         int // bytes of an object key not named in properties
	MaxItems            int // elements of an array without maxItems
	MaxExtraProperties  int // keys per object that properties does not name
	MaxNumberBytes      int // bytes of one number
	MaxWhitespace       int // whitespace bytes in a row between tokens
	MaxSchemaBytes      int // size of the schema document
	MaxSchemaNodes      int // subschemas in the schema
	MaxEnumValues       int // values of one enum
	MaxEnumBytes        int // compact bytes of one enum or const value
	MaxObjectProperties int // properties of one object schema (64 at most)
	// MaxObjectProperties over 64, MaxDepth and MaxWhitespace over 255 are
	// lowered to those; MaxDepth and MaxNumberBytes under 1 raised to 1.
}

// DefaultOptions are the bounds Compile and ObjectMode use.
var DefaultOptions = Options{
	MaxDepth:            32,
	MaxStringChars:      4096,
	MaxKeyBytes:         256,
	MaxItems:            1024,
	MaxExtraProperties:  256,
	MaxNumberBytes:      32,
	MaxWhitespace:       4,
	MaxSchemaBytes:      256 << 10,
	MaxSchemaNodes:      4096,
	MaxEnumValues:       1024,
	MaxEnumBytes:        4096,
	MaxObjectProperties: 64,
}

// A value type, as a bit in a node's type set.
const (
	tObject = 1 << iota
	tArray
	tString
	tNumber
	tInteger
	tBoolean
	tNull
	tAll = tObject | tArray | tString | tNumber | tInteger | tBoolean | tNull
)

var typeNames = map[string]int{
	"object": tObject, "array": tArray, "string": tString, "number": tNumber,
	"integer": tInteger, "boolean": tBoolean, "null": tNull,
}

// node is one compiled subschema.
type node struct {
	types int // allowed types; tNumber admits integers too

	// objects: names sorted bytewise; props[i] belongs to names[i].
	names    []string
	props    []*node
	required uint64 // bit i: names[i] is required
	extra    *node  // schema of keys not in names; nil forbids them
	maxExtra int

	// arrays: element i has schema prefix[i], later ones items (nil: none)
	prefix             []*node
	items              *node
	minItems, maxItems int

	// strings, in Unicode code points
	minLen, maxLen int
	// pat, when non-nil, reads the bytes of a string under pattern and
	// format (regexdfa.go); minLen and maxLen are counted in.
	pat *stringDFA

	// num, when non-nil, reads numbers under bounds (numbers.go).
	num *numberDFA

	// lits, when non-nil, are the only values allowed, in compact form,
	// sorted bytewise (enum, const, and the synthetic boolean/null nodes).
	lits []string

	// union, when non-nil, makes this an anyOf or oneOf (union.go).
	union *unionInfo

	// disc, when non-nil, makes this an object of one of several object
	// schemas told apart by a discriminator property (union.go): names
	// holds just that property, which must come first, and its value
	// picks the schema the rest of the object follows.
	disc *discUnion

	// Nesting a value needs below the frame it opens, so that the
	// automaton never opens a container it cannot close within
	// Options.MaxDepth (recursive $ref schemas can require any depth).
	// Zero, the default, suits nodes without required containers.
	objDeep  uint16 // levels an object of this node needs below itself
	arrDeep  uint16 // the same for an array
	minDeep  uint16 // levels the shallowest value of this node needs
	propDeep uint16 // the most any property or extra value needs
}

// noInstance is a depth no document reaches: the node has no finite value.
const noInstance = 1 << 14

var (
	boolNode = &node{types: tBoolean, lits: []string{"false", "true"}}
	nullNode = &node{types: tNull, lits: []string{"null"}}
)

// Schema is a compiled constraint, immutable and safe for concurrent use.
type Schema struct {
	root *node
	opts Options
}

// Problem is one thing wrong with a schema, at a JSON pointer into it.
type Problem struct {
	Pointer string // RFC 6901 pointer; "" is the schema's root
	Keyword string // the keyword at fault, or ""
	Message string
}

func (p Problem) String() string {
	at := p.Pointer
	if at == "" {
		at = "/"
	}
	return fmt.Sprintf("%s at %s", p.Message, at)
}

// SchemaError lists everything wrong with a schema; a server answers it with
// 400 and Error() as the message.
type SchemaError struct {
	Problems []Problem
}

func (e *SchemaError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid JSON schema: " + strings.Join(parts, "; ")
}

// Unsupported reports whether every problem is a keyword nvmai does not
// implement (rather than a schema that is wrong).
func (e *SchemaError) Unsupported() bool {
	for _, p := range e.Problems {
		if !strings.HasPrefix(p.Message, "unsupported schema keyword") {
			return false
		}
	}
	return true
}

// annotations are keywords that do not constrain instances.
var annotations = map[string]bool{
	"title": true, "description": true, "$schema": true, "$id": true,
	"$comment": true, "default": true, "examples": true, "deprecated": true,
	"readOnly": true, "writeOnly": true,
	// OpenAPI's (and Pydantic's) hint beside oneOf/anyOf; JSON Schema
	// gives it no meaning, and the alternatives are enforced without it.
	"discriminator": true,
}

// supported are the keywords the compiler implements.
var supported = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "minItems": true, "maxItems": true, "minLength": true,
	"maxLength": true, "enum": true, "const": true, "anyOf": true, "oneOf": true,
	"$ref": true, "$defs": true, "definitions": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"allOf": true, "prefixItems": true, "pattern": true, "format": true, "multipleOf": true,
}

// onlyAnnotationsBeside reports whether kw holds keyword and annotations.
func onlyAnnotationsBeside(kw map[string]json.RawMessage, keyword string) bool {
	for k := range kw {
		if k != keyword && !annotations[k] {
			return false
		}
	}
	return true
}

// containers hold subschemas for $ref and constrain nothing themselves.
var containers = map[string]bool{"$defs": true, "definitions": true}

// Compile compiles a JSON Schema with DefaultOptions.
func Compile(schema json.RawMessage) (*Schema, error) {
	return CompileWithOptions(schema, DefaultOptions)
}

// CompileWithOptions compiles a JSON Schema in the subset described in
// docs/structured-output.md. Every problem is reported, each with its
// pointer; the error is a *SchemaError.
func CompileWithOptions(schema json.RawMessage, opts Options) (*Schema, error) {
	opts = opts.clamped()
	if len(schema) > opts.MaxSchemaBytes {
		return nil, &SchemaError{[]Problem{{Message: fmt.Sprintf("schema is %d bytes, over the %d-byte limit", len(schema), opts.MaxSchemaBytes)}}}
	}
	var probe json.RawMessage
	if err := json.Unmarshal(schema, &probe); err != nil {
		return nil, &SchemaError{[]Problem{{Message: "schema is not JSON: " + err.Error()}}}
	}
	c := &compiler{opts: opts, root: schema, refs: map[string]*refTarget{}}
	root := c.node(schema, "", 0)
	if len(c.problems) > 0 {
		return nil, &SchemaError{c.problems}
	}
	c.fillAliases()
	for _, u := range c.unions {
		c.finishUnion(u)
	}
	if len(c.problems) > 0 {
		return nil, &SchemaError{c.problems}
	}
	settleDepths(root)
	buildVariants(root)
	if int(root.minDeep) > opts.MaxDepth {
		return nil, &SchemaError{[]Problem{{Message: fmt.Sprintf("schema has no instance nested less than %d levels deep (a required property or minItems recurses without end?)", opts.MaxDepth+1)}}}
	}
	return &Schema{root: root, opts: opts}, nil
}

// clamped bounds o by what the automaton's frames can count (object
// properties are bits of a uint64, depth and whitespace runs are bytes) and
// keeps the smallest documents possible: a top-level object, a digit.
func (o Options) clamped() Options {
	o.MaxObjectProperties = min(o.MaxObjectProperties, 64)
	o.MaxDepth = min(max(o.MaxDepth, 1), 255)
	o.MaxNumberBytes = max(o.MaxNumberBytes, 1)
	o.MaxWhitespace = min(o.MaxWhitespace, 255)
	return o
}

// ObjectMode is response_format json_object: any JSON object.
func ObjectMode(opts Options) *Schema {
	opts = opts.clamped()
	any := anyNode(opts)
	return &Schema{root: &node{types: tObject, extra: any, maxExtra: opts.MaxExtraProperties}, opts: opts}
}

func anyNode(opts Options) *node {
	// Its object and array children are itself; Options.MaxDepth bounds
	// the nesting at run time.
	n := &node{types: tAll, maxExtra: opts.MaxExtraProperties,
		maxItems: opts.MaxItems, maxLen: opts.MaxStringChars}
	n.extra, n.items = n, n
	return n
}

type compiler struct {
	opts     Options
	nodes    int
	problems []Problem

	root   json.RawMessage
	refs   map[string]*refTarget // by the pointer $ref names
	merged int                   // bytes of the schemas allOf merges have made
	// mergedPatterns are the patterns and formats allOf merged for the
	// schema at a pointer: a merged schema has one "pattern" keyword, and
	// a string must match them all.
	mergedPatterns map[string][]patternSource
	// unions are the anyOf and oneOf nodes, told apart once every $ref
	// target they may name has compiled.
	unions []*unionInfo
	// levels counts the objects and arrays the subschema being compiled
	// sits in, so that a $ref back to a target still being compiled can
	// tell recursion through a container from a loop with none.
	levels int
}

// refTarget is a subschema named by $ref. Each is compiled once; a $ref
// met while it compiles gets its node before the node is filled in.
type refTarget struct {
	n      *node
	levels int // c.levels when its compilation began
	busy   bool
	// aliasOf is a target still compiling whose node this one's target
	// turned out to be ({"$ref": …} and nothing else); its content is
	// copied once everything has compiled.
	aliasOf *refTarget
}

func (c *compiler) fail(ptr, keyword, format string, args ...any) {
	c.problems = append(c.problems, Problem{Pointer: ptr, Keyword: keyword, Message: fmt.Sprintf(format, args...)})
}

func pointer(base string, tokens ...string) string {
	for _, t := range tokens {
		t = strings.ReplaceAll(t, "~", "~0")
		base += "/" + strings.ReplaceAll(t, "/", "~1")
	}
	return base
}

// node compiles the subschema raw at ptr; it returns nil after a problem.
func (c *compiler) node(raw json.RawMessage, ptr string, depth int) *node {
	c.nodes++
	if c.nodes > c.opts.MaxSchemaNodes {
		if c.nodes == c.opts.MaxSchemaNodes+1 {
			c.fail(ptr, "", "schema has more than %d subschemas", c.opts.MaxSchemaNodes)
		}
		return nil
	}
	if depth >= c.opts.MaxDepth {
		c.fail(ptr, "", "schema nests %d levels or deeper", c.opts.MaxDepth)
		return nil
	}
	raw = bytes.Trim(raw, jsonSpace)
	switch string(raw) {
	case "true":
		return anyNode(c.opts)
	case "false":
		c.fail(ptr, "", "schema false allows no value")
		return nil
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(raw, &kw); err != nil || kw == nil {
		c.fail(ptr, "", "a schema must be an object or a boolean")
		return nil
	}
	keys := make([]string, 0, len(kw))
	for k := range kw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bad := false
	for _, k := range keys {
		if !annotations[k] && !supported[k] {
			c.fail(pointer(ptr, k), k, "unsupported schema keyword %q", k)
			bad = true
		}
	}
	if bad {
		return nil
	}
	for k := range containers {
		delete(kw, k)
	}
	_, hasAllOf := kw["allOf"]
	if hasAllOf || kw["$ref"] != nil && !onlyAnnotationsBeside(kw, "$ref") {
		return c.allOf(kw, ptr, depth)
	}
	if ref, ok := kw["$ref"]; ok {
		return c.ref(ref, ptr)
	}
	for _, keyword := range []string{"anyOf", "oneOf"} {
		if _, ok := kw[keyword]; ok {
			return c.union(keyword, kw, ptr, depth)
		}
	}
	n := &node{types: tAll, maxLen: c.opts.MaxStringChars, maxItems: c.opts.MaxItems}
	if t, ok := kw["type"]; ok {
		n.types = c.types(t, pointer(ptr, "type"))
	}
	c.object(n, kw, ptr, depth)
	c.array(n, kw, ptr, depth)
	c.strings(n, kw, ptr)
	c.compileBounds(n, kw, ptr)
	_, isEnum := kw["enum"]
	_, isConst := kw["const"]
	if isEnum || isConst {
		return c.literals(n, kw, ptr)
	}
	return n
}

func (c *compiler) types(raw json.RawMessage, ptr string) int {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		t, ok := typeNames[one]
		if !ok {
			c.fail(ptr, "type", "unknown type %q", one)
		}
		return t
	}
	var many []string
	if json.Unmarshal(raw, &many) != nil || len(many) == 0 {
		c.fail(ptr, "type", "type must be a type name or a non-empty array of them")
		return 0
	}
	if dup := duplicate(many); dup != "" {
		c.fail(ptr, "type", "type lists %q twice", dup)
		return 0
	}
	set := 0
	for i, name := range many {
		t, ok := typeNames[name]
		if !ok {
			c.fail(pointer(ptr, fmt.Sprint(i)), "type", "unknown type %q", name)
			return 0
		}
		set |= t
	}
	return set
}

// nonNegative reads an integer keyword; ok is false when it is absent.
func (c *compiler) nonNegative(kw map[string]json.RawMessage, key, ptr string) (int, bool) {
	raw, ok := kw[key]
	if !ok {
		return 0, false
	}
	var v float64
	if json.Unmarshal(raw, &v) != nil || v < 0 || v != float64(int64(v)) {
		c.fail(pointer(ptr, key), key, "%s must be a non-negative integer", key)
		return 0, false
	}
	if v > 1<<30 {
		v = 1 << 30
	}
	return int(v), true
}

func (c *compiler) object(n *node, kw map[string]json.RawMessage, ptr string, depth int) {
	c.levels++
	defer func() { c.levels-- }()
	n.extra, n.maxExtra = anyNode(c.opts), c.opts.MaxExtraProperties
	if raw, ok := kw["additionalProperties"]; ok {
		if string(bytes.Trim(raw, jsonSpace)) == "false" {
			n.extra = nil
		} else {
			n.extra = c.node(raw, pointer(ptr, "additionalProperties"), depth+1)
		}
	}
	var props map[string]json.RawMessage
	if raw, ok := kw["properties"]; ok {
		if json.Unmarshal(raw, &props) != nil || props == nil {
			c.fail(pointer(ptr, "properties"), "properties", "properties must be an object")
		}
	}
	var required []string
	if raw, ok := kw["required"]; ok {
		if json.Unmarshal(raw, &required) != nil {
			c.fail(pointer(ptr, "required"), "required", "required must be an array of strings")
		}
		if dup := duplicate(required); dup != "" {
			// The meta-schema asks for unique names; validators refuse
			// the schema otherwise.
			c.fail(pointer(ptr, "required"), "required", "required lists %q twice", dup)
		}
	}
	for _, r := range required {
		if _, ok := props[r]; !ok {
			if n.extra == nil {
				c.fail(pointer(ptr, "required"), "required", "required property %q is not in properties and additionalProperties is false", r)
				continue
			}
			if props == nil {
				props = map[string]json.RawMessage{}
			}
			props[r] = json.RawMessage("true")
		}
	}
	if len(props) > c.opts.MaxObjectProperties {
		c.fail(pointer(ptr, "properties"), "properties", "%d properties is over the limit of %d", len(props), c.opts.MaxObjectProperties)
		return
	}
	for name := range props {
		n.names = append(n.names, name)
	}
	sort.Strings(n.names)
	n.props = make([]*node, len(n.names))
	for i, name := range n.names {
		if !plainKey(name) {
			c.fail(pointer(ptr, "properties", name), "properties", "property name %q needs escaping in JSON, which nvmai does not generate in keys", name)
		}
		if len(name) >= c.opts.MaxKeyBytes {
			c.fail(pointer(ptr, "properties", name), "properties", "property name is over %d bytes", c.opts.MaxKeyBytes-1)
		}
		n.props[i] = c.node(props[name], pointer(ptr, "properties", name), depth+1)
	}
	for _, r := range required {
		if i := sort.SearchStrings(n.names, r); i < len(n.names) && n.names[i] == r {
			n.required |= 1 << i
		}
	}
}

// plainKey reports whether name is written in JSON without escapes.
func plainKey(name string) bool {
	for _, r := range name {
		if r < 0x20 || r == '"' || r == '\\' || r == 0xFFFD {
			return false
		}
	}
	return true
}

func (c *compiler) array(n *node, kw map[string]json.RawMessage, ptr string, depth int) {
	c.levels++
	defer func() { c.levels-- }()
	n.items = anyNode(c.opts)
	if raw, ok := kw["prefixItems"]; ok {
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
			c.fail(pointer(ptr, "prefixItems"), "prefixItems", "prefixItems must be a non-empty array of schemas")
		}
		for i, s := range list {
			n.prefix = append(n.prefix, c.node(s, pointer(ptr, "prefixItems", fmt.Sprint(i)), depth+1))
		}
	}
	noMore := false
	if raw, ok := kw["items"]; ok {
		switch t := bytes.Trim(raw, jsonSpace); {
		case len(t) > 0 && t[0] == '[':
			c.fail(pointer(ptr, "items"), "items", "unsupported schema keyword \"items\" as an array (tuple validation; write it as prefixItems)")
		case string(t) == "false":
			n.items, noMore = nil, true
		default:
			n.items = c.node(raw, pointer(ptr, "items"), depth+1)
		}
	}
	lo, _ := c.nonNegative(kw, "minItems", ptr)
	hi, ok := c.nonNegative(kw, "maxItems", ptr)
	if noMore && (!ok || hi > len(n.prefix)) {
		hi, ok = len(n.prefix), true
		if lo > hi {
			c.fail(pointer(ptr, "minItems"), "minItems", "minItems %d is over the %d prefixItems that items false allows", lo, hi)
			return
		}
	}
	switch {
	case ok && lo > hi:
		c.fail(pointer(ptr, "minItems"), "minItems", "minItems %d is over maxItems %d", lo, hi)
	case lo > c.opts.MaxItems:
		c.fail(pointer(ptr, "minItems"), "minItems", "minItems %d is over nvmai's limit of %d items", lo, c.opts.MaxItems)
	}
	if !ok || hi > c.opts.MaxItems {
		hi = c.opts.MaxItems
	}
	n.minItems, n.maxItems = lo, hi
}

func (c *compiler) strings(n *node, kw map[string]json.RawMessage, ptr string) {
	lo, _ := c.nonNegative(kw, "minLength", ptr)
	hi, ok := c.nonNegative(kw, "maxLength", ptr)
	switch {
	case ok && lo > hi:
		c.fail(pointer(ptr, "minLength"), "minLength", "minLength %d is over maxLength %d", lo, hi)
	case lo > c.opts.MaxStringChars:
		c.fail(pointer(ptr, "minLength"), "minLength", "minLength %d is over nvmai's limit of %d characters", lo, c.opts.MaxStringChars)
	}
	if !ok || hi > c.opts.MaxStringChars {
		hi = c.opts.MaxStringChars
	}
	n.minLen, n.maxLen = lo, hi
	c.patterns(n, kw, ptr)
}

// patterns compiles pattern (and the patterns of format, and those allOf
// merged) into one automaton over the string's bytes.
func (c *compiler) patterns(n *node, kw map[string]json.RawMessage, ptr string) {
	var pats []patternSource
	if raw, ok := kw["pattern"]; ok {
		var src string
		if json.Unmarshal(raw, &src) != nil {
			c.fail(pointer(ptr, "pattern"), "pattern", "pattern must be a string")
			return
		}
		pats = append(pats, patternSource{regex: src, keyword: "pattern", label: fmt.Sprintf("pattern %q", src)})
	}
	if raw, ok := kw["format"]; ok {
		pats = append(pats, c.format(raw, ptr)...)
	}
	pats = append(pats, c.mergedPatterns[ptr]...)
	delete(c.mergedPatterns, ptr)
	if len(pats) == 0 || n.types&tString == 0 || len(c.problems) > 0 {
		return
	}
	for _, p := range pats {
		if p.maxLen > 0 {
			n.maxLen = min(n.maxLen, p.maxLen)
		}
	}
	d, which, err := buildStringDFA(pats, n.minLen, n.maxLen, limits.PatternChars, limits.PatternStates)
	if err == nil {
		n.pat = d
		return
	}
	var re *RegexError
	errors.As(err, &re)
	if which == nil {
		// The patterns together (with the lengths) are at fault: past
		// nvmai's limits, or matching no string at all.
		key := pats[0].keyword
		if re.Unsupported {
			c.fail(pointer(ptr, key), key, "unsupported schema keyword %q: %s: %s", key, describePatterns(pats), re.Message)
		} else {
			c.fail(pointer(ptr, key), key, "%s: %s", describePatterns(pats), re.Message)
		}
		return
	}
	switch {
	case which.keyword == "format":
		c.fail(pointer(ptr, "format"), "format", "%s: internal pattern: %v", which.label, err)
	case re.Unsupported:
		c.fail(pointer(ptr, "pattern"), "pattern", "unsupported schema keyword \"pattern\": %s: %v", which.label, err)
	default:
		c.fail(pointer(ptr, "pattern"), "pattern", "%s is not an ECMA-262 regular expression: %v", which.label, err)
	}
}

// format reads a format keyword into its patterns, or records that it is
// not one nvmai enforces.
func (c *compiler) format(raw json.RawMessage, ptr string) []patternSource {
	var name string
	if json.Unmarshal(raw, &name) != nil {
		c.fail(pointer(ptr, "format"), "format", "format must be a string")
		return nil
	}
	pats, ok := formatSources(name)
	if !ok {
		c.fail(pointer(ptr, "format"), "format", "unsupported schema keyword \"format\": format %q is not one nvmai enforces (it enforces %s)", name, formatNames())
	}
	return pats
}

func describePatterns(pats []patternSource) string {
	labels := make([]string, len(pats))
	for i, p := range pats {
		labels[i] = p.label
	}
	return strings.Join(labels, " with ")
}

// literals compiles enum and const into the sorted compact encodings of
// the values allowed. The other keywords beside them have compiled into n;
// a value they refuse can never validate, so it is dropped, and so is a
// const outside the enum. n's automaton decides, so a value is kept only
// if nvmai would accept it there anyway.
func (c *compiler) literals(n *node, kw map[string]json.RawMessage, ptr string) *node {
	if len(c.problems) > 0 {
		return nil
	}
	var values []json.RawMessage
	if raw, ok := kw["enum"]; ok {
		if json.Unmarshal(raw, &values) != nil || len(values) == 0 {
			c.fail(pointer(ptr, "enum"), "enum", "enum must be a non-empty array")
			return nil
		}
		if len(values) > c.opts.MaxEnumValues {
			c.fail(pointer(ptr, "enum"), "enum", "enum has %d values, over the limit of %d", len(values), c.opts.MaxEnumValues)
			return nil
		}
	}
	var constant []byte
	if raw, ok := kw["const"]; ok {
		lit, err := compact(raw)
		if err != nil || len(lit) > c.opts.MaxEnumBytes {
			c.fail(pointer(ptr, "const"), "const", "value is not JSON or is over %d bytes", c.opts.MaxEnumBytes)
			return nil
		}
		constant = lit
		if values == nil {
			values = []json.RawMessage{raw}
		}
	}
	if !c.finishUnionsBelow(n, ptr) {
		return nil
	}
	check := &Schema{root: n, opts: c.opts}
	seen := map[string]bool{}
	var lits []string
	for i, v := range values {
		lit, err := compact(v)
		if err != nil || len(lit) > c.opts.MaxEnumBytes {
			c.fail(pointer(ptr, "enum", fmt.Sprint(i)), "enum", "value is not JSON or is over %d bytes", c.opts.MaxEnumBytes)
			return nil
		}
		if seen[string(lit)] || constant != nil && !bytes.Equal(lit, constant) {
			continue
		}
		if st := check.Start(); !st.AcceptBytes(lit) || !st.Done() {
			continue // the keywords beside enum refuse it: it can never validate
		}
		seen[string(lit)] = true
		lits = append(lits, string(lit))
	}
	if len(lits) == 0 {
		c.fail(ptr, "enum", "no enum or const value satisfies the keywords beside it")
		return nil
	}
	sort.Strings(lits)
	return &node{types: n.types, lits: lits}
}

// compact re-encodes v the one way the automaton accepts it, which is also
// how values are compared: no whitespace, object keys sorted, HTML
// characters unescaped, and numbers of integer value written as integers
// (1.0 and 1e2 are the integers 1 and 100 to JSON Schema).
func compact(v json.RawMessage) ([]byte, error) {
	var x any
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data")
	}
	x = canonicalNumbers(x)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// canonicalNumbers rewrites the integer-valued numbers in x as integers.
func canonicalNumbers(x any) any {
	switch v := x.(type) {
	case json.Number:
		s := string(v)
		if !strings.ContainsAny(s, ".eE") {
			if s == "-0" {
				return json.Number("0")
			}
			return v
		}
		// A long literal or a large exponent would make a huge integer.
		if len(s) > 32 || strings.ContainsAny(s, "eE") && len(s[strings.IndexAny(s, "eE")+1:]) > 3 {
			return v
		}
		if r, ok := new(big.Rat).SetString(s); ok && r.IsInt() {
			if i := r.Num(); i.BitLen() <= 256 {
				return json.Number(i.String())
			}
		}
		return v
	case []any:
		for i := range v {
			v[i] = canonicalNumbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = canonicalNumbers(v[k])
		}
	}
	return x
}

// startsWith reports whether a value of n can begin with byte b.
func startsWith(n *node, b byte) bool {
	if n.union != nil {
		return n.union.first[b] != 0
	}
	if n.lits != nil {
		for _, l := range n.lits {
			if l[0] == b {
				return true
			}
		}
		return false
	}
	switch {
	case b == '{':
		return n.types&tObject != 0
	case b == '[':
		return n.types&tArray != 0
	case b == '"':
		return n.types&tString != 0
	case b == '-' || b >= '0' && b <= '9':
		if n.num != nil { // bounds decide the sign and first digit
			return n.types&(tNumber|tInteger) != 0 && n.num.next[0][numClass(b)] >= 0
		}
		return n.types&(tNumber|tInteger) != 0
	case b == 't' || b == 'f':
		return n.types&tBoolean != 0
	case b == 'n':
		return n.types&tNull != 0
	}
	return false
}

// jsonSpace is the whitespace JSON allows between tokens.
const jsonSpace = " \t\n\r"

// ref compiles a local $ref ("#" or "#/json/pointer") to the node of its
// target, shared by every $ref that names it.
//
// A recursive schema becomes a cyclic graph of nodes rather than being
// unrolled: the automaton already follows node pointers lazily as it
// reads, and bounds nesting at run time by Options.MaxDepth. What a cycle
// adds is containers that must open below others (a required recursive
// property), so settleDepths computes how deep each node's values must
// nest, and the automaton refuses to open a container, or to start a
// property or element, that could not be closed within MaxDepth. Unrolling
// would instead copy each definition once per level, MaxDepth times.
func (c *compiler) ref(raw json.RawMessage, ptr string) *node {
	var ref string
	if json.Unmarshal(raw, &ref) != nil {
		c.fail(pointer(ptr, "$ref"), "$ref", "$ref must be a string")
		return nil
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		c.fail(pointer(ptr, "$ref"), "$ref", "unsupported schema keyword \"$ref\" to %q: only local references (\"#\", \"#/$defs/Name\") are supported", ref)
		return nil
	}
	at, target, err := resolvePointer(c.root, ref[1:])
	if err != "" {
		c.fail(pointer(ptr, "$ref"), "$ref", "$ref %q: %s", ref, err)
		return nil
	}
	if t, ok := c.refs[at]; ok {
		if t.busy && t.levels == c.levels {
			c.fail(pointer(ptr, "$ref"), "$ref", "$ref %q refers back to itself without an object or array between", ref)
			return nil
		}
		return t.n
	}
	t := &refTarget{n: &node{}, levels: c.levels, busy: true}
	c.refs[at] = t
	saved := c.levels
	n := c.node(target, at, 0)
	c.levels = saved
	t.busy = false
	if n == nil {
		return nil
	}
	for _, other := range c.refs {
		if other.n == n && other.busy {
			t.aliasOf = other
			return t.n
		}
	}
	*t.n = *n
	return t.n
}

// fillAliases copies into each alias target the node it stands for, now
// that every target has compiled.
func (c *compiler) fillAliases() {
	for _, t := range c.refs {
		from := t
		for from.aliasOf != nil {
			from = from.aliasOf
		}
		if from != t {
			*t.n = *from.n
		}
	}
}

// resolvePointer finds the subschema at an RFC 6901 pointer (already
// without its "#") in doc, and returns the pointer in the canonical form
// problems use.
func resolvePointer(doc json.RawMessage, ptr string) (string, json.RawMessage, string) {
	if ptr == "" {
		return "", doc, ""
	}
	cur, at := doc, ""
	for _, tok := range strings.Split(ptr[1:], "/") {
		if strings.Contains(tok, "%") {
			return "", nil, "percent-encoded pointers are not supported"
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var obj map[string]json.RawMessage
		var arr []json.RawMessage
		switch {
		case json.Unmarshal(cur, &obj) == nil && obj != nil:
			next, ok := obj[tok]
			if !ok {
				return "", nil, "no such subschema"
			}
			cur = next
		case json.Unmarshal(cur, &arr) == nil:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(arr) || fmt.Sprint(i) != tok {
				return "", nil, "no such subschema"
			}
			cur = arr[i]
		default:
			return "", nil, "no such subschema"
		}
		at = pointer(at, tok)
	}
	return at, cur, ""
}

// visitValues calls visit on the schemas of n's values: its properties,
// other keys, prefix items and items (nil when absent), the children every
// walk of the schema graph takes before its unions.
func (n *node) visitValues(visit func(*node)) {
	for _, p := range n.props {
		visit(p)
	}
	visit(n.extra)
	visit(n.items)
	for _, p := range n.prefix {
		visit(p)
	}
}

// settleDepths computes the depth fields of every node reachable from
// root: the least fixed point of the nesting each value needs, found by
// iterating from "no instance" down until nothing changes.
func settleDepths(root *node) {
	var all []*node
	seen := map[*node]bool{}
	var visit func(n *node)
	visit = func(n *node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		all = append(all, n)
		n.visitValues(visit)
		if n.union != nil {
			for _, a := range n.union.alts {
				visit(a)
			}
		}
		if n.disc != nil {
			for _, a := range n.disc.all {
				visit(a)
			}
		}
	}
	visit(root)
	for _, n := range all {
		n.objDeep, n.arrDeep, n.minDeep, n.propDeep = noInstance, noInstance, noInstance, noInstance
	}
	for changed := true; changed; {
		changed = false
		for _, n := range all {
			obj, arr, least, props := nodeDepths(n)
			if obj != n.objDeep || arr != n.arrDeep || least != n.minDeep || props != n.propDeep {
				n.objDeep, n.arrDeep, n.minDeep, n.propDeep = obj, arr, least, props
				changed = true
			}
		}
	}
}

// nodeDepths computes n's depth fields from its children's current ones.
func nodeDepths(n *node) (obj, arr, least, props uint16) {
	if n.lits != nil {
		return 0, 0, 0, 0 // literals are matched byte by byte, without frames
	}
	if n.union != nil {
		least = noInstance
		for _, a := range n.union.alts {
			least = min(least, a.minDeep)
		}
		return 0, 0, least, 0
	}
	if n.disc != nil {
		// The object opens where some alternative can close; which ones
		// its discriminator may then pick depends on the room left
		// (discUnion.variants).
		obj = noInstance
		for _, a := range n.disc.all {
			obj, props = min(obj, a.objDeep), max(props, a.propDeep)
		}
		if n.disc.byKey != nil {
			obj = noInstance
			for i := range n.names {
				obj = min(obj, uint16(min(keyNeed(n, i), noInstance)))
			}
		}
		return obj, noInstance, min(obj+1, noInstance), min(props, noInstance)
	}
	for i, p := range n.props {
		props = max(props, p.minDeep)
		if n.required&(1<<i) != 0 {
			obj = max(obj, p.minDeep)
		}
	}
	if n.extra != nil {
		props = max(props, n.extra.minDeep)
	}
	for i := 0; i < n.minItems; i++ {
		item := n.itemAt(i)
		if item == nil {
			arr = noInstance
			break
		}
		arr = max(arr, item.minDeep)
		if i >= len(n.prefix) {
			break // the rest are all items
		}
	}
	least = noInstance
	if n.types&^(tObject|tArray) != 0 {
		least = 0
	}
	if n.types&tObject != 0 && obj < noInstance {
		least = min(least, obj+1)
	}
	if n.types&tArray != 0 && arr < noInstance {
		least = min(least, arr+1)
	}
	return min(obj, noInstance), min(arr, noInstance), least, min(props, noInstance)
}

// itemAt is the schema of array element i, or nil when there is none.
func (n *node) itemAt(i int) *node {
	if i < len(n.prefix) {
		return n.prefix[i]
	}
	return n.items
}

// duplicate returns a string that occurs twice in list, or "".
func duplicate(list []string) string {
	seen := map[string]bool{}
	for _, s := range list {
		if seen[s] {
			return s
		}
		seen[s] = true
	}
	return ""
}
