package jsonconstrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"

	"sort"
)

// allOf (and $ref beside other keywords, which 2020-12 reads the same
// way) is enforced by merging its subschemas into one schema and compiling
// that: types intersected, properties unioned (a property two subschemas
// name gets both schemas, merged in turn), required unioned, bounds and
// lengths tightened, enums intersected. An automaton follows one schema at
// a time, so keywords that do not merge into one are refused by name.

// member is one subschema of an allOf, flattened: its own $ref and allOf
// already merged away.
type member struct {
	at string
	kw map[string]json.RawMessage
}

const maxAllOfHops = 32

func (c *compiler) allOf(kw map[string]json.RawMessage, ptr string, depth int) *node {
	var members []member
	if !c.flatten(kw, ptr, 0, &members) {
		return nil
	}
	merged, ok := c.merge(members, ptr)
	if !ok {
		return nil
	}
	raw, err := json.Marshal(merged)
	if err != nil {
		c.fail(ptr, "allOf", "cannot merge allOf: %v", err)
		return nil
	}
	// Merging copies subschemas; a $ref to an enclosing schema inside a
	// merged property copies it again at each level, so the copies are
	// bounded like the schema itself.
	if c.merged += len(raw); c.merged > 4*c.opts.MaxSchemaBytes {
		c.fail(ptr, "allOf", "merging allOf makes schemas over %d bytes in all (a recursive $ref inside allOf?)", 4*c.opts.MaxSchemaBytes)
		return nil
	}
	// The merged schema stands in for this one, at the same depth; it has
	// no allOf left, so this does not recurse here.
	c.nodes--
	return c.node(raw, ptr, depth)
}

// flatten appends kw and the subschemas it includes by allOf or $ref.
func (c *compiler) flatten(kw map[string]json.RawMessage, at string, hops int, out *[]member) bool {
	if hops > maxAllOfHops {
		c.fail(at, "allOf", "allOf and $ref include each other more than %d deep (a loop?)", maxAllOfHops)
		return false
	}
	own := map[string]json.RawMessage{}
	for k, v := range kw {
		if !annotations[k] && !containers[k] && k != "allOf" && k != "$ref" {
			own[k] = v
		}
	}
	*out = append(*out, member{at: at, kw: own})
	if raw, ok := kw["$ref"]; ok {
		var ref string
		if json.Unmarshal(raw, &ref) != nil || ref != "#" && (len(ref) < 2 || ref[:2] != "#/") {
			c.fail(pointer(at, "$ref"), "$ref", "unsupported schema keyword \"$ref\" to %s: only local references (\"#\", \"#/$defs/Name\") are supported", raw)
			return false
		}
		targetAt, target, err := resolvePointer(c.root, ref[1:])
		if err != "" {
			c.fail(pointer(at, "$ref"), "$ref", "$ref %q: %s", ref, err)
			return false
		}
		sub, ok := c.subschema(target, targetAt)
		if !ok || !c.flatten(sub, targetAt, hops+1, out) {
			return false
		}
	}
	if raw, ok := kw["allOf"]; ok {
		var subs []json.RawMessage
		if json.Unmarshal(raw, &subs) != nil || len(subs) == 0 {
			c.fail(pointer(at, "allOf"), "allOf", "allOf must be a non-empty array")
			return false
		}
		for i, s := range subs {
			subAt := pointer(at, "allOf", fmt.Sprint(i))
			sub, ok := c.subschema(s, subAt)
			if !ok || !c.flatten(sub, subAt, hops+1, out) {
				return false
			}
		}
	}
	return true
}

// subschema reads a schema as keywords; true is none, false is refused.
func (c *compiler) subschema(raw json.RawMessage, at string) (map[string]json.RawMessage, bool) {
	switch string(bytes.Trim(raw, jsonSpace)) {
	case "true":
		return map[string]json.RawMessage{}, true
	case "false":
		c.fail(at, "", "schema false allows no value")
		return nil, false
	}
	var kw map[string]json.RawMessage
	if json.Unmarshal(raw, &kw) != nil || kw == nil {
		c.fail(at, "", "a schema must be an object or a boolean")
		return nil, false
	}
	return kw, true
}

// merge folds the members into one schema's keywords.
func (c *compiler) merge(members []member, ptr string) (map[string]json.RawMessage, bool) {
	out := map[string]json.RawMessage{}
	ok := true
	fail := func(at, k, format string, args ...any) {
		c.fail(pointer(at, k), k, format, args...)
		ok = false
	}
	types := tAll
	typed := false
	props := map[string][]json.RawMessage{}
	required := map[string]bool{}
	var items []json.RawMessage
	type addl struct {
		raw   json.RawMessage
		names map[string]bool
	}
	var addls []addl
	anyOfFrom := ""
	var patterns []patternSource // a string must match every one
	for _, m := range members {
		keys := make([]string, 0, len(m.kw))
		for k := range m.kw {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			v := m.kw[k]
			switch k {
			case "type":
				t := c.types(v, pointer(m.at, "type"))
				if t&tNumber != 0 {
					t |= tInteger
				}
				types &= t
				typed = true
			case "properties":
				var p map[string]json.RawMessage
				if json.Unmarshal(v, &p) != nil || p == nil {
					fail(m.at, k, "properties must be an object")
					continue
				}
				for name, s := range p {
					props[name] = append(props[name], s)
				}
			case "required":
				var r []string
				if json.Unmarshal(v, &r) != nil {
					fail(m.at, k, "required must be an array of strings")
				}
				for _, name := range r {
					required[name] = true
				}
			case "additionalProperties":
				var p map[string]json.RawMessage
				json.Unmarshal(m.kw["properties"], &p)
				names := map[string]bool{}
				for name := range p {
					names[name] = true
				}
				addls = append(addls, addl{v, names})
			case "items":
				if t := bytes.Trim(v, jsonSpace); len(t) > 0 && t[0] == '[' {
					fail(m.at, k, "unsupported schema keyword \"items\" as an array (tuple validation)")
					continue
				}
				items = append(items, v)
			case "minItems", "minLength":
				tighten(out, k, v, 1)
			case "maxItems", "maxLength":
				tighten(out, k, v, -1)
			case "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum":
				if t := string(bytes.Trim(v, jsonSpace)); t == "true" || t == "false" {
					fail(m.at, k, "%s as a boolean (draft 4) cannot be merged in allOf; write the bound as a number", k)
					continue
				}
				dir := 1
				if k == "maximum" || k == "exclusiveMaximum" {
					dir = -1
				}
				tighten(out, k, v, dir)
			case "multipleOf":
				out[k] = lcmMultiple(out[k], v)
			case "const":
				lit, err := compact(v)
				if prev, seen := out[k]; seen {
					if p, _ := compact(prev); err != nil || !bytes.Equal(p, lit) {
						fail(m.at, k, "allOf subschemas have different const values, so no value satisfies them")
					}
					continue
				}
				out[k] = v
			case "enum":
				prev, seen := out[k]
				if !seen {
					out[k] = v
					continue
				}
				both, err := intersectEnums(prev, v)
				if err != nil || len(both) == 0 {
					fail(m.at, k, "allOf subschemas' enums have no value in common")
					continue
				}
				out[k] = both
			case "pattern":
				var src string
				if json.Unmarshal(v, &src) != nil {
					fail(m.at, k, "pattern must be a string")
					continue
				}
				patterns = append(patterns, patternSource{regex: src, keyword: k, label: fmt.Sprintf("pattern %q", src)})
			case "format":
				before := len(c.problems)
				patterns = append(patterns, c.format(v, m.at)...)
				ok = ok && len(c.problems) == before
			case "anyOf", "oneOf":
				if anyOfFrom != "" {
					fail(m.at, k, "%s in more than one allOf subschema (also at %s) cannot be merged", k, anyOfFrom)
					continue
				}
				anyOfFrom = pointer(m.at, k)
				out[k] = v
			default:
				if supported[k] {
					fail(m.at, k, "schema keyword %q cannot be merged in allOf", k)
				} else {
					fail(m.at, k, "unsupported schema keyword %q", k)
				}
			}
		}
	}
	if !ok {
		return nil, false
	}
	if len(patterns) > 0 {
		if c.mergedPatterns == nil {
			c.mergedPatterns = map[string][]patternSource{}
		}
		c.mergedPatterns[ptr] = patterns
	}
	if typed {
		if types == 0 {
			c.fail(pointer(ptr, "allOf"), "type", "allOf subschemas allow no type in common")
			return nil, false
		}
		var names []string
		for name, bit := range typeNames {
			if types&bit != 0 && !(bit == tInteger && types&tNumber != 0) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		out["type"], _ = json.Marshal(names)
	}
	// additionalProperties applies to the names its own subschema does not
	// list: every other subschema's properties must satisfy it too.
	allFalse := false
	var extras []json.RawMessage
	for _, a := range addls {
		isFalse := string(bytes.Trim(a.raw, jsonSpace)) == "false"
		allFalse = allFalse || isFalse
		if !isFalse {
			extras = append(extras, a.raw)
		}
		for name := range props {
			if a.names[name] {
				continue
			}
			if isFalse {
				if required[name] {
					c.fail(pointer(ptr, "allOf"), "additionalProperties", "required property %q is refused by an allOf subschema's additionalProperties false", name)
					return nil, false
				}
				delete(props, name)
				continue
			}
			props[name] = append(props[name], a.raw)
		}
	}
	if allFalse {
		out["additionalProperties"] = json.RawMessage("false")
	} else if len(extras) > 0 {
		out["additionalProperties"] = allOfOf(extras)
	}
	if len(props) > 0 {
		p := map[string]json.RawMessage{}
		for name, list := range props {
			p[name] = allOfOf(list)
		}
		out["properties"], _ = json.Marshal(p)
	}
	if len(required) > 0 {
		var r []string
		for name := range required {
			r = append(r, name)
		}
		sort.Strings(r)
		out["required"], _ = json.Marshal(r)
	}
	if len(items) > 0 {
		out["items"] = allOfOf(items)
	}
	return out, true
}

// allOfOf is the one schema, or an allOf of several.
func allOfOf(list []json.RawMessage) json.RawMessage {
	if len(list) == 1 {
		return list[0]
	}
	b, _ := json.Marshal(map[string][]json.RawMessage{"allOf": list})
	return b
}

// tighten keeps in out[k] the larger (dir 1) or smaller (dir -1) number.
func tighten(out map[string]json.RawMessage, k string, v json.RawMessage, dir int) {
	prev, ok := out[k]
	if !ok {
		out[k] = v
		return
	}
	a, b := ratOf(prev), ratOf(v)
	if a == nil || b == nil {
		out[k] = v // not a number: compiling it reports the problem
		return
	}
	if b.Cmp(a)*dir > 0 {
		out[k] = v
	}
}

// intersectEnums keeps the values of a that b also holds, compared
// canonically.
func intersectEnums(a, b json.RawMessage) (json.RawMessage, error) {
	var as, bs []json.RawMessage
	if err := json.Unmarshal(a, &as); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &bs); err != nil {
		return nil, err
	}
	inB := map[string]bool{}
	for _, v := range bs {
		lit, err := compact(v)
		if err != nil {
			return nil, err
		}
		inB[string(lit)] = true
	}
	var both []json.RawMessage
	for _, v := range as {
		if lit, err := compact(v); err == nil && inB[string(lit)] {
			both = append(both, v)
		}
	}
	if len(both) == 0 {
		return nil, nil
	}
	return json.Marshal(both)
}

// lcmMultiple is the least common multiple of two multipleOf values (a
// number is a multiple of both exactly when it is a multiple of it), or
// the new one when either is not a positive number (compiling it then
// reports the problem).
func lcmMultiple(prev, v json.RawMessage) json.RawMessage {
	if prev == nil {
		return v
	}
	a, b := ratOf(prev), ratOf(v)
	if a == nil || b == nil || a.Sign() <= 0 || b.Sign() <= 0 {
		return v
	}
	// a = p/q and b = r/s in lowest terms: lcm is lcm(p, r) / gcd(q, s).
	p, q, r, sd := a.Num(), a.Denom(), b.Num(), b.Denom()
	g := new(big.Int).GCD(nil, nil, p, r)
	l := new(big.Int).Mul(p, r)
	l.Quo(l, g)
	d := new(big.Int).GCD(nil, nil, q, sd)
	lcm := new(big.Rat).SetFrac(l, d)
	places := 0
	for x := new(big.Rat).Set(lcm); !x.IsInt() && places < 64; places++ {
		x.Mul(x, big.NewRat(10, 1))
	}
	return json.RawMessage(lcm.FloatString(places))
}
