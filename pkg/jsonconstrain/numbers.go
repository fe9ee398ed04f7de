package jsonconstrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
)

// Numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum)
// compile into a DFA over the bytes of a number, built once per schema
// node: it reads the sign, the integer digits and, for "number", a
// fraction, comparing them digit by digit with each bound written out in
// decimal, and accepts exactly the numbers in range (exponents are not
// written under bounds: comparing them digit by digit would need the
// whole number first). Its states carry the byte count, so the
// MaxNumberBytes limit is part of it, and states from which no number in
// range can be finished are pruned, so a writer can never be cornered.

// numberDFA is the compiled automaton: next[state][class] is the next
// state or -1, for the byte classes of numClass.
type numberDFA struct {
	next   [][12]int16
	accept []bool
}

const maxNumberStates = 1 << 13

// numClass maps a byte to its class: the digits 0-9, '-' and '.'.
func numClass(b byte) int {
	switch {
	case b >= '0' && b <= '9':
		return int(b - '0')
	case b == '-':
		return 10
	case b == '.':
		return 11
	}
	return -1
}

// A bound on a magnitude: the decimal digits of its integer part ("0"
// under 1) and of its fraction (no trailing zeros).
type magBound struct {
	set       bool
	intDigits string
	frac      string
	exclusive bool
}

// relations of a number read so far to a bound
const (
	relLT = iota
	relEQ
	relGT
	relLonger // integer part longer than the bound's: greater
)

type numKey struct {
	neg, frac, zero bool // sign, in the fraction, integer part is "0"
	digitsAfterDot  bool
	k               uint8 // integer digits read
	total           uint8 // bytes read
	relLo, relHi    uint8
	posLo, posHi    uint8 // fraction digits matched while relEQ
	// multipleOf a/10^s: the digits read so far (the fraction's first
	// fracDigits of them, at most s) as an integer, mod a.
	rem        uint16
	fracDigits uint8
}

type numBuilder struct {
	integer  bool
	maxBytes int
	pos, neg [2]magBound // [lower, upper] on the magnitude per sign
	posOK    bool
	negOK    bool
	states   map[numKey]int
	keys     []numKey
	dfa      *numberDFA
	// multipleOf is mod / 10^scale; mod 0 means none.
	mod, scale int
	overflow   bool // more than maxNumberStates
}

// compileBounds compiles the bound keywords of kw into n.num, or records a
// problem naming the keyword that cannot be enforced.
func (c *compiler) compileBounds(n *node, kw map[string]json.RawMessage, ptr string) {
	lo, loExcl, loKey := c.bound(kw, ptr, "minimum", "exclusiveMinimum", 1)
	hi, hiExcl, hiKey := c.bound(kw, ptr, "maximum", "exclusiveMaximum", -1)
	mod, scale, hasMod := c.multipleOf(kw, ptr)
	okLo, okHi := lo != nil, hi != nil
	if !okLo && !okHi && !hasMod || n.types&(tNumber|tInteger) == 0 {
		return
	}
	b := &numBuilder{integer: n.types&tNumber == 0, maxBytes: c.opts.MaxNumberBytes,
		states: map[numKey]int{}, dfa: &numberDFA{}, posOK: true, negOK: true, mod: mod, scale: scale}
	if hasMod && scale == 0 {
		// Every multiple of an integer is an integer: written as one.
		b.integer = true
	}
	var bad string
	// x = M for "M", x = -M for "-M": turn the bounds on x into bounds on M.
	if okLo {
		if lo.Sign() >= 0 {
			b.pos[0], bad = magnitude(lo, loExcl)
		} else {
			b.neg[1], bad = magnitude(new(big.Rat).Neg(lo), loExcl)
		}
		if lo.Sign() == 0 {
			b.neg[1], _ = magnitude(lo, loExcl)
		}
		if lo.Sign() > 0 {
			b.negOK = false
		}
		if bad != "" {
			c.fail(pointer(ptr, loKey), loKey, "%s", bad)
			return
		}
	}
	if okHi {
		if hi.Sign() >= 0 {
			b.pos[1], bad = magnitude(hi, hiExcl)
			if hi.Sign() == 0 {
				b.neg[0], _ = magnitude(hi, hiExcl)
			}
		} else {
			b.neg[0], bad = magnitude(new(big.Rat).Neg(hi), hiExcl)
			b.posOK = false
		}
	}
	if bad != "" {
		c.fail(pointer(ptr, hiKey), hiKey, "%s", bad)
		return
	}
	if !b.build() {
		key := loKey
		if key == "" {
			key = hiKey
		}
		if key == "" || hasMod && b.overflow {
			key = "multipleOf"
		}
		kind := "number"
		if b.integer {
			kind = "integer"
		}
		if b.overflow {
			c.fail(pointer(ptr, key), key, "unsupported schema keyword %q: the digit automaton for these bounds and multipleOf needs more than %d states (the divisor times the digits a number may have); narrow the bounds or use a smaller multipleOf", key, maxNumberStates)
			return
		}
		c.fail(pointer(ptr, key), key, "no %s of at most %d bytes (written without an exponent) lies within the bounds and is a multiple of multipleOf", kind, c.opts.MaxNumberBytes)
		return
	}
	n.num = b.dfa
}

// bound reads a lower (dir 1) or upper (dir -1) bound from the inclusive
// keyword and the exclusive one (a number, or draft 4's boolean that makes
// the inclusive one exclusive), keeping the tighter.
// It returns the keyword the bound came from ("" for none).
func (c *compiler) bound(kw map[string]json.RawMessage, ptr, incl, excl string, dir int) (*big.Rat, bool, string) {
	var val *big.Rat
	exclusive, from := false, ""
	if raw, ok := kw[incl]; ok {
		if val = ratOf(raw); val == nil {
			c.fail(pointer(ptr, incl), incl, "%s must be a number (with an exponent of at most 3 digits)", incl)
			return nil, false, ""
		}
		from = incl
	}
	if raw, ok := kw[excl]; ok {
		switch t := string(bytes.Trim(raw, jsonSpace)); {
		case t == "true" || t == "false":
			if val == nil {
				c.fail(pointer(ptr, excl), excl, "%s %s (draft 4) needs %s beside it", excl, t, incl)
				return nil, false, ""
			}
			exclusive = t == "true"
		default:
			e := ratOf(raw)
			if e == nil {
				c.fail(pointer(ptr, excl), excl, "%s must be a number (or, as in draft 4, a boolean)", excl)
				return nil, false, ""
			}
			if val == nil || e.Cmp(val)*dir >= 0 {
				val, exclusive, from = e, true, excl
			}
		}
	}
	return val, exclusive, from
}

func ratOf(raw json.RawMessage) *big.Rat {
	raw = bytes.Trim(raw, jsonSpace)
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return nil // json.Number would take "3", a string
	}
	var num json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&num) != nil {
		return nil
	}
	s := string(num)
	// A huge exponent would make a huge rational; such bounds are refused
	// below anyway for having too many digits.
	if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-0")) > 3 {
		return nil
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil
	}
	return r
}

// magnitude writes a non-negative bound out in decimal digits.
func magnitude(r *big.Rat, exclusive bool) (magBound, string) {
	const maxDigits = 64
	scaled := new(big.Rat).Set(r)
	ten := big.NewRat(10, 1)
	for places := 0; places <= maxDigits; places++ {
		if scaled.IsInt() {
			s := r.FloatString(places)
			whole, frac, _ := strings.Cut(s, ".")
			if len(whole) > maxDigits {
				break
			}
			return magBound{set: true, intDigits: whole, frac: strings.TrimRight(frac, "0"), exclusive: exclusive}, ""
		}
		scaled.Mul(scaled, ten)
	}
	return magBound{}, fmt.Sprintf("bound %s has more than %d decimal digits, more than nvmai compares", r.FloatString(8), maxDigits)
}

// build explores the reachable states and prunes those that cannot reach
// an accepting one; it reports whether any number is accepted.
func (b *numBuilder) build() bool {
	b.state(numKey{})
	for i := 0; i < len(b.keys); i++ {
		if len(b.keys) > maxNumberStates {
			b.overflow = true
			return false
		}
		key := b.keys[i]
		for class := 0; class < 12; class++ {
			if next, ok := b.step(key, class); ok {
				b.dfa.next[i][class] = int16(b.state(next))
			}
		}
		b.dfa.accept[i] = b.accepts(key)
	}
	live := make([]bool, len(b.keys))
	for changed := true; changed; {
		changed = false
		for i := range b.keys {
			if live[i] {
				continue
			}
			ok := b.dfa.accept[i]
			for _, t := range b.dfa.next[i] {
				ok = ok || t >= 0 && live[t]
			}
			if ok {
				live[i], changed = true, true
			}
		}
	}
	for i := range b.dfa.next {
		for class, t := range b.dfa.next[i] {
			if t >= 0 && !live[t] {
				b.dfa.next[i][class] = -1
			}
		}
	}
	return live[0]
}

func (b *numBuilder) state(k numKey) int {
	if i, ok := b.states[k]; ok {
		return i
	}
	i := len(b.keys)
	b.states[k] = i
	b.keys = append(b.keys, k)
	var none [12]int16
	for j := range none {
		none[j] = -1
	}
	b.dfa.next = append(b.dfa.next, none)
	b.dfa.accept = append(b.dfa.accept, false)
	return i
}

func (b *numBuilder) bounds(k numKey) *[2]magBound {
	if k.neg {
		return &b.neg
	}
	return &b.pos
}

// step is the JSON number grammar (no exponent) with the comparisons.
func (b *numBuilder) step(k numKey, class int) (numKey, bool) {
	if int(k.total)+1 > b.maxBytes {
		return k, false
	}
	k.total++
	started := k.k > 0
	bs := b.bounds(k)
	switch {
	case class == 10: // '-'
		if k.total != 1 || !b.negOK {
			return k, false
		}
		k.neg = true
		return k, true
	case !k.neg && k.total == 1 && !b.posOK:
		return k, false
	case class == 11: // '.'
		if b.integer || k.frac || !started {
			return k, false
		}
		k.frac = true
		k.relLo, k.posLo = resolve(k.relLo, k.k, bs[0])
		k.relHi, k.posHi = resolve(k.relHi, k.k, bs[1])
		return k, true
	case k.frac:
		k.digitsAfterDot = true
		if b.mod > 0 {
			if int(k.fracDigits) >= b.scale {
				if class != 0 {
					return k, false // past multipleOf's decimals only zeros
				}
			} else {
				k.rem = uint16((int(k.rem)*10 + class) % b.mod)
				k.fracDigits++
			}
		}
		k.relLo, k.posLo = fracStep(k.relLo, k.posLo, bs[0], byte('0'+class))
		k.relHi, k.posHi = fracStep(k.relHi, k.posHi, bs[1], byte('0'+class))
		return k, true
	}
	if k.zero {
		return k, false // no digit after a leading 0
	}
	if !started && class == 0 {
		k.zero = true
	}
	if b.mod > 0 {
		k.rem = uint16((int(k.rem)*10 + class) % b.mod)
	}
	d := byte('0' + class)
	k.relLo = intStep(k.relLo, k.k, bs[0], d)
	k.relHi = intStep(k.relHi, k.k, bs[1], d)
	k.k++
	return k, true
}

// intStep compares one more integer digit, at index i, with the bound's.
func intStep(rel, i uint8, bd magBound, d byte) uint8 {
	if int(i) >= len(bd.intDigits) {
		return relLonger
	}
	if i == 0 {
		rel = relEQ
	}
	if rel != relEQ {
		return rel
	}
	switch c := bd.intDigits[i]; {
	case d < c:
		return relLT
	case d > c:
		return relGT
	}
	return relEQ
}

// resolve turns the integer part's comparison into the number's, once the
// integer part has ended after k digits.
func resolve(rel, k uint8, bd magBound) (uint8, uint8) {
	switch {
	case rel == relLonger || int(k) > len(bd.intDigits):
		return relGT, 0
	case int(k) < len(bd.intDigits):
		return relLT, 0
	}
	return rel, 0
}

// fracStep compares one more fraction digit with the bound's (zeros past
// its end); pos counts the digits matched, up to the bound's length.
func fracStep(rel, pos uint8, bd magBound, d byte) (uint8, uint8) {
	if rel != relEQ {
		return rel, 0
	}
	c := byte('0')
	if int(pos) < len(bd.frac) {
		c = bd.frac[pos]
	}
	switch {
	case d < c:
		return relLT, 0
	case d > c:
		return relGT, 0
	}
	return relEQ, min(pos+1, uint8(len(bd.frac)))
}

// accepts reports whether the number read so far is complete and within
// both bounds.
func (b *numBuilder) accepts(k numKey) bool {
	if k.k == 0 || k.frac && !k.digitsAfterDot {
		return false
	}
	if b.mod > 0 {
		// The number times 10^scale, mod the divisor's digits.
		rem := int(k.rem)
		for f := int(k.fracDigits); f < b.scale; f++ {
			rem = rem * 10 % b.mod
		}
		if rem != 0 {
			return false
		}
	}
	relLo, relHi := k.relLo, k.relHi
	bs := b.bounds(k)
	posLo, posHi := k.posLo, k.posHi
	if !k.frac {
		relLo, posLo = resolve(relLo, k.k, bs[0])
		relHi, posHi = resolve(relHi, k.k, bs[1])
	}
	// Equal so far with fraction digits of the bound left: those include
	// a non-zero one, so the number is less.
	if relLo == relEQ && int(posLo) < len(bs[0].frac) {
		relLo = relLT
	}
	if relHi == relEQ && int(posHi) < len(bs[1].frac) {
		relHi = relLT
	}
	lo, hi := bs[0], bs[1]
	okLo := !lo.set || relLo == relGT || relLo == relEQ && !lo.exclusive
	okHi := !hi.set || relHi == relLT || relHi == relEQ && !hi.exclusive
	return okLo && okHi
}

// multipleOf reads the keyword as mod / 10^scale, both integers (every
// JSON number is a terminating decimal); ok is false when it is absent or
// refused.
func (c *compiler) multipleOf(kw map[string]json.RawMessage, ptr string) (mod, scale int, ok bool) {
	raw, present := kw["multipleOf"]
	if !present {
		return 0, 0, false
	}
	r := ratOf(raw)
	if r == nil || r.Sign() <= 0 {
		c.fail(pointer(ptr, "multipleOf"), "multipleOf", "multipleOf must be a number greater than 0")
		return 0, 0, false
	}
	scaled := new(big.Rat).Set(r)
	for !scaled.IsInt() {
		if scale++; scale > maxMultipleOfScale {
			c.fail(pointer(ptr, "multipleOf"), "multipleOf", "unsupported schema keyword \"multipleOf\": %s has more than %d decimals", r.FloatString(maxMultipleOfScale+2), maxMultipleOfScale)
			return 0, 0, false
		}
		scaled.Mul(scaled, big.NewRat(10, 1))
	}
	num := scaled.Num()
	if !num.IsInt64() || num.Int64() > limits.MultipleOf {
		c.fail(pointer(ptr, "multipleOf"), "multipleOf", "unsupported schema keyword \"multipleOf\": %s has the digits %s, over nvmai's limit of %d (the digit automaton tracks the remainder by it)", r.RatString(), num, limits.MultipleOf)
		return 0, 0, false
	}
	return int(num.Int64()), scale, true
}

// maxMultipleOfScale bounds multipleOf's decimals (0.000001 has 6).
const maxMultipleOfScale = 16
