package main

import "fmt"

// actConstants are exp32's constants (activation.go) as float32 bits, in
// the order AVX-512 broadcasts them into Z16 onwards.
var actConstants = []struct {
	name string
	bits uint32
}{
	{"Sign", 0x80000000},
	{"Lo", 0xc2ae0000},
	{"Hi", 0x42b00000},
	{"Log2e", 0x3fb8aa3b},
	{"Ln2Hi", 0x3f318000},
	{"Ln2Lo", 0xb95e8083},
	{"C0", 0x39506967},
	{"C1", 0x3ab743ce},
	{"C2", 0x3c088908},
	{"C3", 0x3d2aa9c1},
	{"C4", 0x3e2aaaaa},
	{"C5", 0x3f000000},
	{"One", 0x3f800000},
	{"Bias", 0x7f},
}

// actRegistersAVX2 are the constants AVX2 keeps in registers: those an
// instruction needs as its first source, which cannot be a memory operand.
// AVX2 has sixteen registers, too few to hold them all; the rest are memory
// operands.
var actRegistersAVX2 = map[string]int{"Lo": 13, "Hi": 12, "One": 11}

// konst is the operand of exp32's constant name.
func (a isa) konst(name string) string {
	for i, c := range actConstants {
		if c.name != name {
			continue
		}
		if a.wide() {
			return a.v(16 + i)
		}
		if r, ok := actRegistersAVX2[name]; ok {
			return a.v(r)
		}
		return "act" + name + "<>(SB)"
	}
	panic("no constant " + name)
}

// activate: activateGeneric, a register of lanes at a time; mode 4 (actExp)
// is expGeneric, the shift read from y.
func activate(a isa) {
	if !a.wide() {
		out.WriteString("\n// exp32's constants, eight lanes each, for activateAVX2.\n")
		for _, c := range actConstants {
			for off := 0; off < a.bytes(); off += 8 {
				fmt.Fprintf(&out, "DATA act%s<>+%d(SB)/8, $%#016x\n", c.name, off, uint64(c.bits)<<32|uint64(c.bits))
			}
			fmt.Fprintf(&out, "GLOBL act%s<>(SB), RODATA|NOPTR, $%d\n", c.name, a.bytes())
		}
	}
	fn("activate"+a.name, "(dst, x, y *float32, n, mode int)", 40, fmt.Sprintf(`
activateGeneric, %d lanes at a time%s: the same operations in the same
order, each rounded on its own (no fused multiply-add), so bit for bit
equal. Mode 4 (actExp) is expGeneric, the shift read from y.`, a.lanes, a.tailNote()))
	emit("MOVQ dst+0(FP), DI")
	emit("MOVQ x+8(FP), SI")
	emit("MOVQ y+16(FP), DX")
	emit("MOVQ n+24(FP), CX")
	emit("MOVQ mode+32(FP), R8")
	for i, c := range actConstants {
		if a.wide() {
			emit("MOVL $%#x, AX // %s", c.bits, c.name)
			emit("VPBROADCASTD AX, %s", a.v(16+i))
		} else if r, ok := actRegistersAVX2[c.name]; ok {
			emit("VMOVUPS act%s<>(SB), %s", c.name, a.v(r))
		}
	}
	shift := a.v(15)
	emit("CMPQ R8, $4")
	emit("JNE  lanes")
	emit("VBROADCASTSS (DX), %s // the shift", shift)
	label("lanes")
	a.lanesLoopHead()
	x, y := a.v(0), a.v(1)
	z, n, t, r, r2, p, pow, s := a.v(2), a.v(3), a.v(4), a.v(5), a.v(6), a.v(7), a.v(8), a.v(9)
	k := a.konst
	a.load("(SI)", x)
	emit("CMPQ R8, $4")
	emit("JEQ  shifted")
	a.xor(k("Sign"), x, z)
	emit("JMP  clamp")
	label("shifted")
	emit("VSUBPS %s, %s, %s // z = x - shift", shift, x, z)
	label("clamp")
	emit("// clamp z to [lo, hi]; z is the second source, so a NaN z passes through")
	emit("VMAXPS %s, %s, %s", z, k("Lo"), z)
	emit("VMINPS %s, %s, %s", z, k("Hi"), z)
	emit("VMULPS %s, %s, %s // z·log2e", k("Log2e"), z, n)
	a.roundEven(n)
	emit("VMULPS %s, %s, %s", k("Ln2Hi"), n, t)
	emit("VSUBPS %s, %s, %s // r = z - n·ln2Hi", t, z, r)
	emit("VMULPS %s, %s, %s", k("Ln2Lo"), n, t)
	emit("VSUBPS %s, %s, %s // r -= n·ln2Lo", t, r, r)
	emit("VMULPS %s, %s, %s // r²", r, r, r2)
	emit("VMULPS %s, %s, %s // p = c0·r + c1, then Horner", k("C0"), r, p)
	for i := 1; i <= 5; i++ {
		if i > 1 {
			emit("VMULPS %s, %s, %s", r, p, p)
		}
		emit("VADDPS %s, %s, %s", k(fmt.Sprintf("C%d", i)), p, p)
	}
	emit("VMULPS %s, %s, %s // p·r² + r + 1", r2, p, p)
	emit("VADDPS %s, %s, %s", r, p, p)
	emit("VADDPS %s, %s, %s", k("One"), p, p)
	emit("VCVTPS2DQ %s, %s // 2ⁿ from the exponent bits", n, pow)
	emit("VPADDD %s, %s, %s", k("Bias"), pow, pow)
	emit("VPSLLD $23, %s, %s", pow, pow)
	emit("VMULPS %s, %s, %s // e^z", pow, p, p)
	emit("CMPQ R8, $4")
	emit("JNE  sigmoid")
	emit("VMOVAPS %s, %s", p, s)
	emit("JMP  store")
	label("sigmoid")
	emit("VADDPS %s, %s, %s", k("One"), p, p)
	emit("VDIVPS %s, %s, %s // s = 1/(1+e^-x)", p, k("One"), s)
	emit("CMPQ R8, $0")
	emit("JEQ  store")
	emit("CMPQ R8, $3")
	emit("JEQ  mulsig")
	emit("VMULPS %s, %s, %s // x·s", s, x, s)
	emit("CMPQ R8, $1")
	emit("JEQ  store")
	emit("VMULPS %s, %s, %s // (x·s)·y", a.operand("(DX)", y), s, s)
	emit("JMP  store")
	label("mulsig")
	a.load("(DX)", y)
	emit("VMULPS %s, %s, %s // y·s", s, y, s)
	label("store")
	a.store(s, "(DI)")
	emit("ADDQ $%d, SI", a.bytes())
	emit("ADDQ $%d, DI", a.bytes())
	emit("ADDQ $%d, DX", a.bytes())
	a.lanesLoopEnd()
	label("done")
	emit("VZEROUPPER")
	emit("RET")
}
