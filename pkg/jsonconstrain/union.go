package jsonconstrain

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// anyOf and oneOf compile to alternatives the automaton tells apart as it
// reads, so it never follows two at once: by the first byte of the value
// (which fixes its JSON type, and for enum values, sign and digits of
// bounded numbers, the literal's first byte), or, for object alternatives,
// by a discriminator: a property every one of them requires with a const or
// enum value, no value shared by two. The discriminator is written first
// and picks the schema the rest of the object follows.
//
// Alternatives told apart this way are disjoint: no value is valid for two
// of them. That makes oneOf the same as anyOf here, and is why oneOf is
// accepted exactly where the alternatives can be told apart.

// discUnion is the object alternatives of one anyOf or oneOf.
type discUnion struct {
	alts  map[string]*node // by the discriminator value, compact
	byKey map[string]*node // or by the first key, for key-discriminated objects
	all   []*node          // in schema order
	// variants[k] is the union of the alternatives that need at most
	// need[k] levels below the object (recursive ones can need many):
	// an object opened with less room offers only the discriminator
	// values of alternatives it can close.
	variants []*node
	need     []int
}

// fitting is the variant for an object with room levels below it.
func (d *discUnion) fitting(room int) *node {
	k := sort.SearchInts(d.need, room+1) - 1
	return d.variants[max(k, 0)]
}

// buildVariants fills in the variants of every discriminated union
// reachable from root, once the nesting each alternative needs is known.
func buildVariants(root *node) {
	seen := map[*node]bool{}
	var visit func(n *node)
	visit = func(n *node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		n.visitValues(visit)
		if n.union != nil {
			for _, a := range n.union.alts {
				visit(a)
			}
		}
		if d := n.disc; d != nil && d.variants == nil {
			for _, a := range d.all {
				visit(a)
			}
			var needs []int
			for _, a := range d.all {
				if a.objDeep < noInstance && !slices.Contains(needs, int(a.objDeep)) {
					needs = append(needs, int(a.objDeep))
				}
			}
			if d.byKey != nil {
				needs = needs[:0]
				for i := range n.names {
					if k := keyNeed(n, i); k < noInstance && !slices.Contains(needs, k) {
						needs = append(needs, k)
					}
				}
			}
			sort.Ints(needs)
			for _, need := range needs {
				d.variants = append(d.variants, variant(n, need))
				d.need = append(d.need, need)
			}
			if len(needs) == 0 {
				d.variants, d.need = []*node{n}, []int{0} // never opened: minDeep is noInstance
			}
		}
	}
	visit(root)
}

// variant is the union n narrowed to the alternatives needing at most
// need levels.
func variant(n *node, need int) *node {
	if n.disc.byKey != nil {
		sub := &discUnion{byKey: map[string]*node{}, all: n.disc.all}
		v := *n
		v.names, v.props, v.disc = nil, nil, sub
		v.objDeep = noInstance
		for i, name := range n.names {
			if k := keyNeed(n, i); k <= need {
				v.names = append(v.names, name)
				v.props = append(v.props, n.props[i])
				sub.byKey[name] = n.disc.byKey[name]
				v.objDeep = min(v.objDeep, uint16(k))
			}
		}
		v.minDeep = v.objDeep + 1
		sub.variants, sub.need = []*node{&v}, []int{need}
		return &v
	}
	sub := &discUnion{alts: map[string]*node{}}
	var values []string
	for _, v := range n.props[0].lits {
		if a := n.disc.alts[v]; int(a.objDeep) <= need {
			sub.alts[v] = a
			values = append(values, v)
		}
	}
	v := *n
	v.props = []*node{{types: tAll, lits: values}}
	v.disc = sub
	v.objDeep = noInstance
	for _, a := range n.disc.all {
		if int(a.objDeep) <= need {
			sub.all = append(sub.all, a)
			v.objDeep = min(v.objDeep, a.objDeep)
		}
	}
	v.minDeep = v.objDeep + 1
	sub.variants, sub.need = []*node{&v}, []int{need}
	return &v
}

// maxUnionAlternatives bounds the alternatives of one anyOf or oneOf; the
// automaton dispatches on at most maxDispatch first bytes' worth of them.
const (
	maxUnionAlternatives = 64
	maxDispatch          = 7
)

// unionInfo is an anyOf or oneOf. Nodes are copied where a $ref target
// finishes compiling, so everything filled in later lives behind this
// pointer, which the copies share.
type unionInfo struct {
	// alts are the alternatives the automaton dispatches on (objects
	// told apart by a discriminator count as one); first[b] is the index
	// into alts plus one of the one a value starting with b follows.
	alts  []*node
	first [256]uint8

	keyword string
	ptr     string
	given   []*node // the alternatives as written
	state   uint8   // 0 until finishUnion, 1 during, 2 done
}

// union compiles the alternatives; finishUnion tells them apart once every
// $ref target has compiled (an alternative may name a target still being
// compiled, whose node is filled in later).
func (c *compiler) union(keyword string, kw map[string]json.RawMessage, ptr string, depth int) *node {
	for k := range kw {
		if k != keyword && !annotations[k] {
			c.fail(pointer(ptr, k), k, "unsupported schema keyword %q beside %s", k, keyword)
			return nil
		}
	}
	var raws []json.RawMessage
	if json.Unmarshal(kw[keyword], &raws) != nil || len(raws) == 0 {
		c.fail(pointer(ptr, keyword), keyword, "%s must be a non-empty array", keyword)
		return nil
	}
	if len(raws) > maxUnionAlternatives {
		c.fail(pointer(ptr, keyword), keyword, "%s has %d alternatives; at most %d are supported", keyword, len(raws), maxUnionAlternatives)
		return nil
	}
	u := &unionInfo{keyword: keyword, ptr: ptr}
	for i, a := range raws {
		alt := c.node(a, pointer(ptr, keyword, fmt.Sprint(i)), depth+1)
		if alt == nil {
			return nil
		}
		u.given = append(u.given, alt)
	}
	c.unions = append(c.unions, u)
	return &node{types: tAll, union: u}
}

func (c *compiler) finishUnion(u *unionInfo) {
	if u.state != 0 {
		return // done, or an alternative of itself (a $ref loop, refused already)
	}
	u.state = 1
	defer func() { u.state = 2 }()
	keyword, ptr, alts := u.keyword, u.ptr, u.given
	var objects []int // alternatives that are objects and nothing else
	for i, a := range alts {
		if a.union != nil {
			c.finishUnion(a.union)
		}
		if plainObject(a) {
			objects = append(objects, i)
		}
	}
	// Each entry is one alternative, or the discriminated objects as one.
	type entry struct {
		n     *node
		index int // the alternative, or the first of the objects
	}
	var entries []entry
	grouped := map[int]bool{}
	if len(objects) >= 2 {
		d := c.discriminate(keyword, alts, objects, ptr)
		if d == nil {
			return
		}
		entries = append(entries, entry{d, objects[0]})
		for _, i := range objects {
			grouped[i] = true
		}
	}
	for i, a := range alts {
		if !grouped[i] {
			entries = append(entries, entry{a, i})
		}
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].index < entries[b].index })
	if len(entries) > maxDispatch {
		c.fail(pointer(ptr, keyword), keyword, "%s has %d alternatives that a value's first byte must tell apart; at most %d are supported", keyword, len(entries), maxDispatch)
		return
	}
	for k, e := range entries {
		for b := 0; b < 256; b++ {
			if !startsWith(e.n, byte(b)) {
				continue
			}
			if prev := u.first[b]; prev != 0 {
				c.fail(pointer(ptr, keyword, fmt.Sprint(e.index)), keyword, "alternatives %d and %d can both start with %q; nvmai supports %s only when each alternative starts differently (for example a string or null), or for objects told apart by a required const or enum property", entries[prev-1].index, e.index, rune(b), keyword)
				return
			}
			u.first[b] = uint8(k + 1)
		}
		u.alts = append(u.alts, e.n)
	}
}

// plainObject reports whether every value of n is an object checked by n's
// own properties (no enum, no nested union).
func plainObject(n *node) bool {
	return n.types == tObject && n.lits == nil && n.union == nil && n.disc == nil
}

// discriminate finds, among the object alternatives, a property each
// requires with a const or enum value, no value shared by two, and
// returns the object node that reads it first and then follows the
// alternative its value picks.
func (c *compiler) discriminate(keyword string, alts []*node, objects []int, ptr string) *node {
	first := alts[objects[0]]
	var why []string
	for _, name := range first.names {
		byValue, reason := discriminator(name, alts, objects)
		if reason != "" {
			why = append(why, fmt.Sprintf("%q %s", name, reason))
			continue
		}
		var values []string
		for v := range byValue {
			values = append(values, v)
		}
		sort.Strings(values)
		lits := &node{types: tAll, lits: values}
		d := &discUnion{alts: byValue}
		for _, i := range objects {
			d.all = append(d.all, alts[i])
		}
		return &node{types: tObject, names: []string{name}, props: []*node{lits}, required: 1, disc: d}
	}
	if d := keyDiscriminated(alts, objects); d != nil {
		return d
	}
	detail := "no property is required in each"
	if len(why) > 0 {
		detail = strings.Join(why, "; ")
	}
	c.fail(pointer(ptr, keyword), keyword, "alternatives %v are all objects, and no required const or enum property tells them apart (%s), nor does each have a property the others forbid (additionalProperties false); nvmai accepts %s of objects only with such a discriminator", objects, detail, keyword)
	return nil
}

// keyDiscriminated tells the object alternatives apart by their keys:
// when each has properties that every other forbids (not among its
// properties, and additionalProperties false), the first key written is
// one of those and picks its alternative. A value of one alternative then
// holds a key each other one refuses, so they are disjoint.
func keyDiscriminated(alts []*node, objects []int) *node {
	byKey := map[string]*node{}
	for _, i := range objects {
		a := alts[i]
		owned := 0
		for _, name := range a.names {
			exclusive := true
			for _, j := range objects {
				if b := alts[j]; j != i && (b.extra != nil || slices.Contains(b.names, name)) {
					exclusive = false
					break
				}
			}
			if exclusive {
				byKey[name] = a
				owned++
			}
		}
		if owned == 0 {
			return nil
		}
	}
	n := &node{types: tObject, required: 1, disc: &discUnion{byKey: byKey}}
	for name := range byKey {
		n.names = append(n.names, name)
	}
	sort.Strings(n.names)
	for _, name := range n.names {
		a := byKey[name]
		n.props = append(n.props, a.props[sort.SearchStrings(a.names, name)])
	}
	for _, i := range objects {
		n.disc.all = append(n.disc.all, alts[i])
	}
	return n
}

// keyNeed is the nesting an object needs below itself when its first key
// is names[i] of the key-discriminated n: the alternative's, or that
// key's value's.
func keyNeed(n *node, i int) int {
	a := n.disc.byKey[n.names[i]]
	return int(max(a.objDeep, n.props[i].minDeep))
}

// discriminator maps the values of property name to the alternative each
// picks, or says why name cannot tell the alternatives apart.
func discriminator(name string, alts []*node, objects []int) (map[string]*node, string) {
	byValue := map[string]*node{}
	for _, i := range objects {
		a := alts[i]
		j := sort.SearchStrings(a.names, name)
		if j == len(a.names) || a.names[j] != name || a.required&(1<<j) == 0 {
			return nil, fmt.Sprintf("is not required in alternative %d", i)
		}
		p := a.props[j]
		if p.lits == nil {
			return nil, fmt.Sprintf("has no const or enum in alternative %d", i)
		}
		for _, v := range p.lits {
			if _, dup := byValue[v]; dup {
				return nil, fmt.Sprintf("has the value %s in two alternatives", v)
			}
			byValue[v] = a
		}
	}
	return byValue, ""
}

// finishUnionsBelow tells apart, ahead of the rest, the unions below n,
// so that enum values beside them can be checked by the automaton. A
// union naming a $ref target still being compiled cannot be, and is
// refused there.
func (c *compiler) finishUnionsBelow(n *node, ptr string) bool {
	seen := map[*node]bool{}
	ok := true
	var visit func(n *node)
	visit = func(n *node) {
		if n == nil || seen[n] || !ok {
			return
		}
		seen[n] = true
		n.visitValues(visit)
		if u := n.union; u != nil {
			for _, a := range u.given {
				if a.types == 0 && a.union == nil {
					c.fail(ptr, "enum", "enum beside an %s that refers back to a schema being compiled (at %s) is not supported", u.keyword, u.ptr)
					ok = false
					return
				}
				visit(a)
			}
			c.finishUnion(u)
		}
	}
	visit(n)
	return ok && len(c.problems) == 0
}
