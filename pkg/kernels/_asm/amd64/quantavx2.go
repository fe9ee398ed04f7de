package main

import "fmt"

// quantizeAVX2 is quantizeAVX512 with 8-lane registers, bit for bit
// quantizeGroupsGeneric: max|x| ignoring NaN (VMAXPS keeps its second
// source when the first is NaN), dx = max/127 and inv = 127/max by
// division, t = x·inv, NaN lanes to 0 (an ordered compare's mask), round
// half to even (VCVTPS2DQ), Σx in sum8's 8-lane order, Σxq. It returns
// false at the first group whose 127/max overflows, as quantizeAVX512 does.
//
//	SI x   CX groups   DX group index   DI q8   R8 q4   R9 ds   R10 sumQ
//	Y0 |·| mask   Y1–Y8 the group (then its codes)   X15 127.0
func quantizeAVX2() {
	out.WriteString(`
// Dword order that undoes VPACKSSDW/VPACKSSWB's interleave of 128-bit lanes.
DATA packOrder<>+0(SB)/8, $0x0000000400000000
DATA packOrder<>+8(SB)/8, $0x0000000500000001
DATA packOrder<>+16(SB)/8, $0x0000000600000002
DATA packOrder<>+24(SB)/8, $0x0000000700000003
GLOBL packOrder<>(SB), RODATA|NOPTR, $32
`)
	out.WriteString("\n// func quantizeAVX2(x *float32, groups int, q8, q4 *int8, ds *float32, sumQ *int32) bool\n")
	out.WriteString("TEXT ·quantizeAVX2(SB), NOSPLIT, $0-49\n")
	emit("MOVQ x+0(FP), SI")
	emit("MOVQ groups+8(FP), CX")
	emit("MOVQ q8+16(FP), DI")
	emit("MOVQ q4+24(FP), R8")
	emit("MOVQ ds+32(FP), R9")
	emit("MOVQ sumQ+40(FP), R10")
	emit("MOVL $0x7FFFFFFF, R11")
	emit("VMOVD R11, X0")
	emit("VPBROADCASTD X0, Y0")
	emit("MOVL $0x42FE0000, R11") // 127.0
	emit("VMOVD R11, X15")
	emit("XORQ DX, DX")
	label("quantize2_group")
	comment("amax = max|x| over the group, NaNs left out")
	emit("VXORPS Y9, Y9, Y9")
	for i := range 8 {
		emit("VMOVUPS %d(SI), Y%d", 32*i, 1+i)
		emit("VANDPS Y0, Y%d, Y10", 1+i)
		emit("VMAXPS Y9, Y10, Y9")
	}
	quantizeScale(9, 10, 11, 12, "quantize2_scale", "quantize2_tiny")
	quantizeDsSlot()
	emit("VMOVSS X11, (R9)(R11*1)")
	comment("codes: t = x·inv, NaN → 0, round half to even")
	emit("VBROADCASTSS X12, Y12")
	for i := range 8 {
		y := fmt.Sprintf("Y%d", 1+i)
		emit("VMULPS Y12, %s, %s", y, y)
		emit("VCMPPS $7, %s, %s, Y13", y, y) // ordered: not NaN
		emit("VCVTPS2DQ %s, %s", y, y)
		emit("VPAND Y13, %s, %s", y, y)
	}
	comment("Σxq")
	emit("VPADDD Y2, Y1, Y13")
	for i := 3; i <= 8; i++ {
		emit("VPADDD Y%d, Y13, Y13", i)
	}
	emit("VEXTRACTI128 $1, Y13, X14")
	emit("VPADDD X14, X13, X13")
	emit("VPSHUFD $0x4E, X13, X14")
	emit("VPADDD X14, X13, X13")
	emit("VPSHUFD $0xB1, X13, X14")
	emit("VPADDD X14, X13, X13")
	emit("VMOVD X13, (R10)(DX*4)")
	comment("narrow to int8, 32 codes a register; packOrder undoes the lane interleave")
	emit("VMOVDQU packOrder<>(SB), Y10")
	for _, b := range []int{1, 5} {
		emit("VPACKSSDW Y%d, Y%d, Y%d", b+1, b, b)
		emit("VPACKSSDW Y%d, Y%d, Y%d", b+3, b+2, b+2)
		emit("VPACKSSWB Y%d, Y%d, Y%d", b+2, b, b)
		emit("VPERMD Y%d, Y10, Y%d", b, b)
	}
	emit("VMOVDQU Y1, (DI)")
	emit("VMOVDQU Y5, 32(DI)")
	comment("Q4 pair layout: evens at 128·(g/2) + 32·(g%2), odds 64 further")
	emit("VBROADCASTI128 evenOdd<>(SB), Y10")
	emit("VPSHUFB Y10, Y1, Y1")
	emit("VPERMQ $0xD8, Y1, Y1")
	emit("VPSHUFB Y10, Y5, Y5")
	emit("VPERMQ $0xD8, Y5, Y5")
	emit("VPERM2I128 $0x20, Y5, Y1, Y2")
	emit("VPERM2I128 $0x31, Y5, Y1, Y3")
	quantizeQ4Offset()
	emit("VMOVDQU Y2, (R8)(R12*1)")
	emit("VMOVDQU Y3, 64(R8)(R12*1)")
	quantizeSumXAndLoop("quantize2_group", "quantize2_tiny")
}
