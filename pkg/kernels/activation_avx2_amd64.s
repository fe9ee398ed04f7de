//go:build !purego

#include "textflag.h"

// activateAVX512's constants, eight lanes each, for activateAVX2's memory
// operands (AVX2 has sixteen registers, too few to hold them all).
DATA actSign<>+0(SB)/8, $0x8000000080000000
DATA actSign<>+8(SB)/8, $0x8000000080000000
DATA actSign<>+16(SB)/8, $0x8000000080000000
DATA actSign<>+24(SB)/8, $0x8000000080000000
GLOBL actSign<>(SB), RODATA|NOPTR, $32
DATA actLo<>+0(SB)/8, $0xc2ae0000c2ae0000
DATA actLo<>+8(SB)/8, $0xc2ae0000c2ae0000
DATA actLo<>+16(SB)/8, $0xc2ae0000c2ae0000
DATA actLo<>+24(SB)/8, $0xc2ae0000c2ae0000
GLOBL actLo<>(SB), RODATA|NOPTR, $32
DATA actHi<>+0(SB)/8, $0x42b0000042b00000
DATA actHi<>+8(SB)/8, $0x42b0000042b00000
DATA actHi<>+16(SB)/8, $0x42b0000042b00000
DATA actHi<>+24(SB)/8, $0x42b0000042b00000
GLOBL actHi<>(SB), RODATA|NOPTR, $32
DATA actLog2e<>+0(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA actLog2e<>+8(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA actLog2e<>+16(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA actLog2e<>+24(SB)/8, $0x3fb8aa3b3fb8aa3b
GLOBL actLog2e<>(SB), RODATA|NOPTR, $32
DATA actLn2Hi<>+0(SB)/8, $0x3f3180003f318000
DATA actLn2Hi<>+8(SB)/8, $0x3f3180003f318000
DATA actLn2Hi<>+16(SB)/8, $0x3f3180003f318000
DATA actLn2Hi<>+24(SB)/8, $0x3f3180003f318000
GLOBL actLn2Hi<>(SB), RODATA|NOPTR, $32
DATA actLn2Lo<>+0(SB)/8, $0xb95e8083b95e8083
DATA actLn2Lo<>+8(SB)/8, $0xb95e8083b95e8083
DATA actLn2Lo<>+16(SB)/8, $0xb95e8083b95e8083
DATA actLn2Lo<>+24(SB)/8, $0xb95e8083b95e8083
GLOBL actLn2Lo<>(SB), RODATA|NOPTR, $32
DATA actC0<>+0(SB)/8, $0x3950696739506967
DATA actC0<>+8(SB)/8, $0x3950696739506967
DATA actC0<>+16(SB)/8, $0x3950696739506967
DATA actC0<>+24(SB)/8, $0x3950696739506967
GLOBL actC0<>(SB), RODATA|NOPTR, $32
DATA actC1<>+0(SB)/8, $0x3ab743ce3ab743ce
DATA actC1<>+8(SB)/8, $0x3ab743ce3ab743ce
DATA actC1<>+16(SB)/8, $0x3ab743ce3ab743ce
DATA actC1<>+24(SB)/8, $0x3ab743ce3ab743ce
GLOBL actC1<>(SB), RODATA|NOPTR, $32
DATA actC2<>+0(SB)/8, $0x3c0889083c088908
DATA actC2<>+8(SB)/8, $0x3c0889083c088908
DATA actC2<>+16(SB)/8, $0x3c0889083c088908
DATA actC2<>+24(SB)/8, $0x3c0889083c088908
GLOBL actC2<>(SB), RODATA|NOPTR, $32
DATA actC3<>+0(SB)/8, $0x3d2aa9c13d2aa9c1
DATA actC3<>+8(SB)/8, $0x3d2aa9c13d2aa9c1
DATA actC3<>+16(SB)/8, $0x3d2aa9c13d2aa9c1
DATA actC3<>+24(SB)/8, $0x3d2aa9c13d2aa9c1
GLOBL actC3<>(SB), RODATA|NOPTR, $32
DATA actC4<>+0(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA actC4<>+8(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA actC4<>+16(SB)/8, $0x3e2aaaaa3e2aaaaa
DATA actC4<>+24(SB)/8, $0x3e2aaaaa3e2aaaaa
GLOBL actC4<>(SB), RODATA|NOPTR, $32
DATA actC5<>+0(SB)/8, $0x3f0000003f000000
DATA actC5<>+8(SB)/8, $0x3f0000003f000000
DATA actC5<>+16(SB)/8, $0x3f0000003f000000
DATA actC5<>+24(SB)/8, $0x3f0000003f000000
GLOBL actC5<>(SB), RODATA|NOPTR, $32
DATA actOne<>+0(SB)/8, $0x3f8000003f800000
DATA actOne<>+8(SB)/8, $0x3f8000003f800000
DATA actOne<>+16(SB)/8, $0x3f8000003f800000
DATA actOne<>+24(SB)/8, $0x3f8000003f800000
GLOBL actOne<>(SB), RODATA|NOPTR, $32
DATA actBias<>+0(SB)/8, $0x0000007f0000007f
DATA actBias<>+8(SB)/8, $0x0000007f0000007f
DATA actBias<>+16(SB)/8, $0x0000007f0000007f
DATA actBias<>+24(SB)/8, $0x0000007f0000007f
GLOBL actBias<>(SB), RODATA|NOPTR, $32

// func activateAVX2(dst, x, y *float32, n, mode int)
// activateAVX512 eight lanes at a time over n (a multiple of 8) values: the
// same operations in the same order, each rounded on its own, so bit for bit
// activateGeneric. Mode 4 (actExp) is expGeneric, the shift read from y.
TEXT ·activateAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ mode+32(FP), R8
	VMOVUPS actLo<>(SB), Y13
	VMOVUPS actHi<>(SB), Y12
	VMOVUPS actOne<>(SB), Y11
	CMPQ R8, $4
	JNE a2check
	VBROADCASTSS (DX), Y15 // the shift
a2check:
	SHRQ $3, CX
	JZ a2done
a2loop:
	VMOVUPS (SI), Y0 // x
	CMPQ R8, $4
	JEQ a2shifted
	VXORPS actSign<>(SB), Y0, Y2 // z = -x
	JMP a2clamp
a2shifted:
	VSUBPS Y15, Y0, Y2 // z = x - shift
a2clamp:
	// clamp z to [lo, hi]; z is the second source, so a NaN z passes through
	VMAXPS Y2, Y13, Y2
	VMINPS Y2, Y12, Y2
	VMULPS actLog2e<>(SB), Y2, Y3 // z·log2e
	VROUNDPS $0, Y3, Y3 // n, to nearest even
	VMULPS actLn2Hi<>(SB), Y3, Y4
	VSUBPS Y4, Y2, Y5 // r = z - n·ln2Hi
	VMULPS actLn2Lo<>(SB), Y3, Y4
	VSUBPS Y4, Y5, Y5 // r -= n·ln2Lo
	VMULPS Y5, Y5, Y6 // r²
	VMULPS actC0<>(SB), Y5, Y7 // p = c0·r + c1, then Horner
	VADDPS actC1<>(SB), Y7, Y7
	VMULPS Y5, Y7, Y7
	VADDPS actC2<>(SB), Y7, Y7
	VMULPS Y5, Y7, Y7
	VADDPS actC3<>(SB), Y7, Y7
	VMULPS Y5, Y7, Y7
	VADDPS actC4<>(SB), Y7, Y7
	VMULPS Y5, Y7, Y7
	VADDPS actC5<>(SB), Y7, Y7
	VMULPS Y6, Y7, Y7 // p·r² + r + 1
	VADDPS Y5, Y7, Y7
	VADDPS Y11, Y7, Y7
	VCVTPS2DQ Y3, Y8 // 2ⁿ from the exponent bits
	VPADDD actBias<>(SB), Y8, Y8
	VPSLLD $23, Y8, Y8
	VMULPS Y8, Y7, Y7 // e^z
	CMPQ R8, $4
	JNE a2sigmoid
	VMOVAPS Y7, Y9
	JMP a2store
a2sigmoid:
	VADDPS Y11, Y7, Y7
	VDIVPS Y7, Y11, Y9 // s = 1/(1+e^-x)
	CMPQ R8, $0
	JEQ a2store
	CMPQ R8, $3
	JEQ a2mulsig
	VMULPS Y9, Y0, Y9 // x·s
	CMPQ R8, $1
	JEQ a2store
	VMULPS (DX), Y9, Y9 // (x·s)·y
	JMP a2store
a2mulsig:
	VMOVUPS (DX), Y1
	VMULPS Y9, Y1, Y9 // y·s
a2store:
	VMOVUPS Y9, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ a2loop
a2done:
	VZEROUPPER
	RET
