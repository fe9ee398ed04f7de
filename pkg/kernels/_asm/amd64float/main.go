// Command amd64float writes float_amd64.s, the float kernels' assembly.
// Run it from pkg/kernels:
//
//	go run ./_asm/amd64float
//
// (-o names another output, as TestGeneratedAssemblyIsCurrent does.)
//
// A kernel that runs at both widths is described once and emitted twice,
// for AVX-512 (16-lane Z registers, 32 of them, masked tails) and for AVX2
// (8-lane Y registers, 16 of them, tails left to the Go caller). Where the
// two forms differ, the description says why (register count, an
// instruction AVX2 lacks); every operation and its order are the same for
// both, so both stay bit for bit equal to the Go reference. The kernels of
// one width only (floatvec, softmax) share their loops with each other.
//
// The directory starts with "_" so the go tool ignores it outside this
// explicit run.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// families are the kernel families in float_amd64.s, by the Go files that
// declare them.
var families = []struct {
	stubs string
	about string
	emit  func()
}{
	{"attend_amd64.go", "AttendScores and AttendValues, AVX-512 then AVX2", widths(attend)},
	{"attendkv_amd64.go", "The KV cache's widening of Q8 and BF16 rows, AVX-512 then AVX2", widths(widen)},
	{"deltarule_amd64.go", "The gated delta rule, AVX-512 then AVX2", widths(deltaRule)},
	{"activation_amd64.go", "The sigmoid family and Exp, AVX-512 then AVX2", widths(activate)},
	{"floatvec_amd64.go", "BF16 and float32 row dots", floatvec},
	{"softmax_amd64.go", "Softmax's maximum and scaling, AVX-512", softmax},
}

// widths emits a kernel family described once for both extensions.
func widths(family func(isa)) func() {
	return func() {
		family(avx512)
		family(avx2)
	}
}

// isa is one vector extension: the description of a kernel asks it for
// registers and for the few instructions that differ between the two.
type isa struct {
	name  string // suffix of the kernels' Go names
	reg   string // vector register prefix
	lanes int    // float32 lanes per register
	regs  int    // vector registers
}

var (
	avx512 = isa{name: "AVX512", reg: "Z", lanes: 16, regs: 32}
	avx2   = isa{name: "AVX2", reg: "Y", lanes: 8, regs: 16}
)

// v is vector register i at this width; x is its low 128 bits.
func (a isa) v(i int) string { return fmt.Sprintf("%s%d", a.reg, i) }
func (isa) x(i int) string   { return fmt.Sprintf("X%d", i) }

// bytes is one register's width in bytes.
func (a isa) bytes() int { return 4 * a.lanes }

// wide reports whether this is AVX-512, whose 32 registers keep more values
// resident than AVX2's 16.
func (a isa) wide() bool { return a.regs == 32 }

// pick chooses a register number by extension, where the two allocate
// registers differently (AVX2 has half as many).
func (a isa) pick(avx512, avx2 int) int {
	if a.wide() {
		return avx512
	}
	return avx2
}

// zero clears vector register i: VXORPS on a Z register needs AVX512DQ,
// VPXORD needs only AVX512F.
func (a isa) zero(i int) {
	if a.wide() {
		emit("VPXORD %s, %s, %s", a.v(i), a.v(i), a.v(i))
	} else {
		emit("VXORPS %s, %s, %s", a.v(i), a.v(i), a.v(i))
	}
}

// zeroFirst clears vector registers 0 to n−1.
func (a isa) zeroFirst(n int) {
	for i := range n {
		a.zero(i)
	}
}

// extract128 copies 128-bit lane i of vector register src to Xdst.
func (a isa) extract128(i, src, dst int) {
	if a.wide() {
		emit("VEXTRACTF32X4 $%d, %s, %s", i, a.v(src), a.x(dst))
	} else {
		emit("VEXTRACTF128 $%d, %s, %s", i, a.v(src), a.x(dst))
	}
}

// broadcast128 loads the 16 bytes at addr into every 128-bit lane of dst.
func (a isa) broadcast128(addr string, dst int) {
	if a.wide() {
		emit("VBROADCASTF32X4 %s, %s", addr, a.v(dst))
	} else {
		emit("VBROADCASTF128 %s, %s", addr, a.v(dst))
	}
}

// xor sets dst = src1 ^ src2, src2 a register or (AVX2) memory.
func (a isa) xor(src2, src1, dst string) {
	if a.wide() {
		emit("VPXORD %s, %s, %s", src2, src1, dst)
	} else {
		emit("VXORPS %s, %s, %s", src2, src1, dst)
	}
}

// roundEven rounds register r to the nearest integer, ties to even.
func (a isa) roundEven(r string) {
	if a.wide() {
		emit("VRNDSCALEPS $0, %s, %s", r, r)
	} else {
		emit("VROUNDPS $0, %s, %s", r, r)
	}
}

// Kernels over n values in CX take whole registers of lanes: AVX-512 masks
// the tail with K1; AVX2 takes n a multiple of 8 and leaves the tail to its
// Go caller. Between lanesLoopHead and lanesLoopEnd, load, store and
// operand touch only the lanes in n.

// tailNote says how the kernel treats a tail, for its comment.
func (a isa) tailNote() string {
	if a.wide() {
		return " with a masked tail"
	}
	return fmt.Sprintf(" over n (a multiple of %d) values", a.lanes)
}

// lanesLoopHead opens the loop over CX values (label loop); it jumps to
// done when none are left.
func (a isa) lanesLoopHead() {
	if !a.wide() {
		emit("SHRQ $%d, CX", log2(a.lanes))
		emit("JZ   done")
		label("loop")
		return
	}
	emit("MOVQ $-1, AX")
	emit("KMOVW AX, K1 // all %d lanes until the tail", a.lanes)
	label("loop")
	emit("CMPQ CX, $%d", a.lanes)
	emit("JAE  full")
	tailMask("done")
	label("full")
}

// tailMask sets K1 to the low CX lanes, or jumps to label none when CX is 0.
func tailMask(none string) {
	emit("TESTQ CX, CX")
	emit("JZ   %s", none)
	emit("MOVQ $1, AX")
	emit("SHLQ CX, AX")
	emit("DECQ AX")
	emit("KMOVW AX, K1 // the last CX lanes")
}

// lanesLoopEnd closes the loop lanesLoopHead opened.
func (a isa) lanesLoopEnd() {
	if a.wide() {
		emit("SUBQ $%d, CX", a.lanes)
		emit("JG   loop")
	} else {
		emit("DECQ CX")
		emit("JNZ  loop")
	}
}

// load reads a register of lanes at addr into dst, zeros past the tail.
func (a isa) load(addr, dst string) {
	if a.wide() {
		emit("VMOVUPS.Z %s, K1, %s", addr, dst)
	} else {
		emit("VMOVUPS %s, %s", addr, dst)
	}
}

// store writes src's lanes to addr, none past the tail.
func (a isa) store(src, addr string) {
	if a.wide() {
		emit("VMOVUPS %s, K1, %s", src, addr)
	} else {
		emit("VMOVUPS %s, %s", src, addr)
	}
}

// operand is the register of lanes at addr as an instruction's second
// source: the memory itself where no tail is masked, else loaded into
// scratch.
func (a isa) operand(addr, scratch string) string {
	if !a.wide() {
		return addr
	}
	a.load(addr, scratch)
	return scratch
}

var out strings.Builder

func emit(format string, args ...any) { fmt.Fprintf(&out, "\t"+format+"\n", args...) }
func label(name string)               { fmt.Fprintf(&out, "%s:\n", name) }

// fn starts a kernel: its Go signature (parameters and results), what it
// computes (about, one comment line per line), and the TEXT line for
// argBytes of arguments and results.
func fn(name, signature string, argBytes int, about string) {
	fmt.Fprintf(&out, "\n// func %s%s\n//\n", name, signature)
	for _, line := range strings.Split(strings.TrimSpace(about), "\n") {
		out.WriteString(strings.TrimRight("// "+line, " ") + "\n")
	}
	fmt.Fprintf(&out, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, argBytes)
}

func main() {
	output := flag.String("o", "float_amd64.s", "the file to write")
	flag.Parse()
	out.WriteString("// Code generated by \"go run ./_asm/amd64float\"; DO NOT EDIT.\n\n")
	out.WriteString("//go:build !purego\n\n#include \"textflag.h\"\n")
	for _, f := range families {
		fmt.Fprintf(&out, "\n// ---- %s (%s) ----\n", f.about, f.stubs)
		f.emit()
	}
	if err := writeFile(*output, out.String()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// writeFile replaces name only once the whole text is on disk.
func writeFile(name, text string) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", name, err)
	}
	return nil
}
