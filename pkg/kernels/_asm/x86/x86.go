// Package x86 holds the instruction sequences that more than one amd64
// generator (_asm/amd64, _asm/amd64float) emits, written once. Each takes
// the generator's emit function.
package x86

// Emit writes one instruction, as the generators' emit does.
type Emit func(format string, args ...any)

// Fold8 folds the 8 lanes of Y register y into lane 0 of Xy with op ("ADD"
// or "MAX": VxxxPS, then VxxxSS for the last step), pairing lane i with
// lane i+4, then i+2, then i+1 — for ADD ((l0+l4)+(l2+l6)) +
// ((l1+l5)+(l3+l7)), the order the Go references sum in. Xt is scratch.
func Fold8(emit Emit, op string, y, t int) {
	emit("VEXTRACTF128 $1, Y%d, X%d", y, t)
	emit("V%sPS X%d, X%d, X%d", op, t, y, y)
	emit("VMOVHLPS X%d, X%d, X%d", y, y, t)
	emit("V%sPS X%d, X%d, X%d", op, t, y, y)
	emit("VMOVSHDUP X%d, X%d", y, t)
	emit("V%sSS X%d, X%d, X%d", op, t, y, y)
}
