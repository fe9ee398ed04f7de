package main

import "fmt"

func attend(a isa) {
	attendScores(a)
	attendValues(a)
}

// attendScores: lane 4j+l of a register sums head j's products of the
// columns ≡ l (mod 4), so a 16-lane register holds a quad of heads and an
// 8-lane one half a quad (parts registers per quad). Four key positions run
// at once (four independent add chains), each key row read as 16-byte
// pieces broadcast to the heads; one position at a time for the last n mod 4.
func attendScores(a isa) {
	fn("attendScores"+a.name, "(scores, qi *float32, quads, steps int, keys *float32, stride, n int, scale float32)", 60, `
AttendScores for 4·quads heads whose queries qi holds as [steps][heads][4]:
lane 4j+l of a register sums head j's products of the columns ≡ l (mod 4),
`+fmt.Sprint(a.lanes/4)+` heads per register. Four positions run at once (four independent
add chains); each reads its key row as 16-byte pieces broadcast to the heads.`)
	emit("MOVQ scores+0(FP), DI")
	emit("MOVQ qi+8(FP), SI")
	emit("MOVQ quads+16(FP), R14")
	emit("SHLQ $6, R14             // bytes of qi per step of four columns")
	emit("MOVQ keys+32(FP), R10")
	emit("MOVQ stride+40(FP), R11")
	emit("SHLQ $2, R11             // key row stride in bytes")
	emit("MOVQ n+48(FP), R12")
	if a.wide() {
		// AVX-512 has a register to spare for the scale; AVX2's 16 all
		// serve the four positions, so it loads the scale after each loop.
		emit("VBROADCASTSS scale+56(FP), %s", a.v(scoreScale(a)))
	}
	emit("XORQ AX, AX              // position t")
	scorePositions(a, 4)
	scorePositions(a, 1)
	label("done")
	emit("VZEROUPPER")
	emit("RET")
}

func scoreScale(a isa) int { return a.pick(31, 15) }

// scorePositions emits the loop over positions t, positions at a time, and
// within it the loop over quads of heads.
func scorePositions(a isa, positions int) {
	parts := 4 * 4 / a.lanes // registers per quad of heads
	acc := func(p, h int) int { return p*parts + h }
	key := func(p int) int { return 4*parts + parts*p }
	// The products of position p's key and the quad's parts: the last part's
	// product takes the key's register.
	product := func(p, h int) int {
		if h == parts-1 {
			return key(p)
		}
		return key(p) + 1 + h
	}
	// AVX-512 loads the quad's queries once for the four positions; AVX2 has
	// no register left for them and multiplies from memory, as both do for a
	// single position.
	queriesInRegister := a.wide() && positions > 1
	queries := 4*parts + 4*parts
	queryMem := func(h int) string {
		if h == 0 {
			return "(BX)"
		}
		return fmt.Sprintf("%d(BX)", h*a.bytes())
	}
	query := func(h int) string {
		if queriesInRegister {
			return a.v(queries + h)
		}
		return queryMem(h)
	}
	spare := a.pick(9, 14)
	keyAddr := []string{"(R15)", "(R15)(R11*1)", "(R8)", "(R8)(R11*1)"}
	pos := fmt.Sprintf("pos%d", positions)

	out.WriteString("\n")
	label(pos)
	if positions == 4 {
		emit("MOVQ R12, R9")
		emit("SUBQ AX, R9")
		emit("CMPQ R9, $4")
		emit("JLT  pos1")
	} else {
		emit("CMPQ AX, R12")
		emit("JGE  done")
	}
	emit("MOVQ AX, CX")
	emit("IMULQ R11, CX")
	emit("ADDQ R10, CX             // &k_t")
	if positions == 4 {
		// Prefetch the key rows t+4…t+7 while t…t+3 are scored: rows sit a KV
		// row apart, too far for the hardware prefetcher to follow.
		emit("LEAQ (CX)(R11*4), R9")
		emit("MOVQ $4, BX")
		label("pfRow")
		emit("MOVQ steps+24(FP), R13")
		emit("SHLQ $4, R13             // bytes of a key row")
		label("pfLine")
		emit("SUBQ $64, R13")
		emit("JL   pfNext")
		emit("PREFETCHT0 (R9)(R13*1)")
		emit("JMP  pfLine")
		label("pfNext")
		emit("ADDQ R11, R9")
		emit("DECQ BX")
		emit("JNZ  pfRow")
	}
	emit("XORQ DX, DX              // quad")
	label(pos + "quad")
	for i := range positions * parts {
		emit("VXORPS %s, %s, %s", a.v(i), a.v(i), a.v(i))
	}
	emit("MOVQ DX, BX")
	emit("SHLQ $6, BX")
	emit("ADDQ SI, BX              // &qi[0][4·quad]")
	emit("MOVQ CX, R15             // &k_t, then k_t+1 at +R11")
	if positions == 4 {
		emit("LEAQ (CX)(R11*2), R8     // &k_t+2, then k_t+3 at +R11")
	}
	emit("MOVQ steps+24(FP), R13")
	label(pos + "step")
	if queriesInRegister {
		for h := range parts {
			emit("VMOVUPS %s, %s", queryMem(h), a.v(queries+h))
		}
	}
	for p := range positions {
		a.broadcast128(keyAddr[p], key(p))
	}
	for p := range positions {
		for h := range parts {
			emit("VMULPS %s, %s, %s", query(h), a.v(key(p)), a.v(product(p, h)))
		}
	}
	for p := range positions {
		for h := range parts {
			emit("VADDPS %s, %s, %s", a.v(product(p, h)), a.v(acc(p, h)), a.v(acc(p, h)))
		}
	}
	emit("ADDQ $16, R15")
	if positions == 4 {
		emit("ADDQ $16, R8")
	}
	emit("ADDQ R14, BX")
	emit("DECQ R13")
	emit("JNZ  %sstep", pos)
	if !a.wide() {
		emit("VBROADCASTSS scale+56(FP), %s", a.v(scoreScale(a)))
	}
	// Fold each head's four lanes into its first as (l0+l1)+(l2+l3),
	// DotRows' order, and scale it.
	for i := range positions * parts {
		z, t := a.v(i), a.v(spare)
		emit("VSHUFPS $0xB1, %s, %s, %s", z, z, t)
		emit("VADDPS %s, %s, %s", t, z, z)
		emit("VSHUFPS $0x4E, %s, %s, %s", z, z, t)
		emit("VADDPS %s, %s, %s", t, z, z)
		emit("VMULPS %s, %s, %s", a.v(scoreScale(a)), z, z)
	}
	// scores[(4·quad+r)·n + t+p] for r = 0…3: rows n floats (R12·4 bytes)
	// apart, rows 0 and 1 at R9 and R9+R12·4, rows 2 and 3 at R13 and R13+R12·4.
	emit("MOVQ DX, R9")
	emit("IMULQ R12, R9")
	emit("SHLQ $2, R9")
	emit("ADDQ AX, R9")
	emit("LEAQ (DI)(R9*4), R9")
	emit("LEAQ (R9)(R12*8), R13     // rows 2 and 3 of the quad")
	headsPerRegister := a.lanes / 4
	for p := range positions {
		for h := range parts {
			for j := range headsPerRegister {
				head := h*headsPerRegister + j
				addr := fmt.Sprintf("%d(%s)", 4*p, []string{"R9", "R13"}[head/2])
				if head%2 == 1 {
					addr += "(R12*4)"
				}
				from := acc(p, h)
				if j > 0 {
					a.extract128(j, from, spare)
					from = spare
				}
				emit("VMOVSS %s, %s", a.x(from), addr)
			}
		}
	}
	emit("INCQ DX")
	emit("CMPQ DX, quads+16(FP)")
	emit("JLT  %squad", pos)
	if positions == 4 {
		emit("ADDQ $4, AX")
	} else {
		emit("INCQ AX")
	}
	emit("JMP  %s", pos)
}

// attendValues: heads rows of accumulators, four registers of output
// columns each, stay in registers for a tile of positions.
func attendValues(a isa) {
	// Heads per tile: AVX-512's 32 registers hold 4 heads × 4 accumulators,
	// 4 value columns and 5 temporaries; AVX2's 16 hold 2 × 4, 4 and 4.
	heads := a.pick(4, 2)
	group := map[int]string{4: "quads", 2: "pairs"}[heads]
	block := 4 * a.bytes() // bytes of output columns per block
	cols := 4 * a.lanes
	blockShift := log2(block)
	headShift := log2(heads)
	fn("attendValues"+a.name, fmt.Sprintf("(o, w *float32, %s, blocks, wStride int, values *float32, stride, tile int)", group), 64, fmt.Sprintf(`
One tile of AttendValues: for every %d heads and every block of %d
output columns, the block (%d registers) is loaded, takes the tile's
positions in order, and is stored back.`, heads, cols, 4*heads))
	emit("MOVQ o+0(FP), DI")
	emit("MOVQ w+8(FP), SI")
	emit("MOVQ wStride+32(FP), R10")
	emit("SHLQ $2, R10             // weight row stride in bytes")
	emit("MOVQ values+40(FP), R11")
	emit("MOVQ stride+48(FP), R12")
	emit("SHLQ $2, R12             // value row stride in bytes")
	emit("MOVQ blocks+24(FP), R13")
	emit("SHLQ $%d, R13             // output row stride in bytes (d = %d·blocks)", blockShift, cols)
	emit("XORQ R8, R8              // group of heads")
	label("heads")
	emit("XORQ R9, R9              // column block")
	label("block")
	// AX = &o[heads·group][cols·block], rows 2 and 3 from R14
	emit("MOVQ R8, AX")
	emit("IMULQ R13, AX")
	emit("SHLQ $%d, AX", headShift)
	emit("ADDQ DI, AX")
	emit("MOVQ R9, R14")
	emit("SHLQ $%d, R14", blockShift)
	emit("ADDQ R14, AX")
	if heads > 2 {
		emit("LEAQ (AX)(R13*2), R14    // row 2; row 3 at +R13")
	}
	row := func(r int) string { return pairAddr(r, "AX", "R14", "R13") }
	for r := range heads {
		for c := range 4 {
			emit("VMOVUPS %d%s, %s", c*a.bytes(), row(r), a.v(4*r+c))
		}
	}
	// DX = &w[heads·group][0], rows 2 and 3 from R15; CX = &values[0][cols·block]
	emit("MOVQ R8, DX")
	emit("IMULQ R10, DX")
	emit("SHLQ $%d, DX", headShift)
	emit("ADDQ SI, DX")
	if heads > 2 {
		emit("LEAQ (DX)(R10*2), R15")
	}
	emit("MOVQ R9, CX")
	emit("SHLQ $%d, CX", blockShift)
	emit("ADDQ R11, CX")
	emit("MOVQ tile+56(FP), BX")
	label("pos")
	for off := 0; off < block; off += 64 {
		emit("PREFETCHT0 %d(CX)(R12*8)", off)
	}
	values := 4 * heads
	for c := range 4 {
		emit("VMOVUPS %d(CX), %s", c*a.bytes(), a.v(values+c))
	}
	// Each head adds its weight (broadcast) times the value columns; on
	// AVX2 the last product takes the broadcast's register.
	weight := values + 4
	product := func(c int) int {
		if weight+1+c < a.regs {
			return weight + 1 + c
		}
		return weight
	}
	for r := range heads {
		emit("VBROADCASTSS %s, %s", pairAddr(r, "DX", "R15", "R10"), a.v(weight))
		for c := range 4 {
			emit("VMULPS %s, %s, %s", a.v(values+c), a.v(weight), a.v(product(c)))
		}
		for c := range 4 {
			emit("VADDPS %s, %s, %s", a.v(product(c)), a.v(4*r+c), a.v(4*r+c))
		}
	}
	emit("ADDQ R12, CX")
	emit("ADDQ $4, DX")
	if heads > 2 {
		emit("ADDQ $4, R15")
	}
	emit("DECQ BX")
	emit("JNZ  pos")
	for r := range heads {
		for c := range 4 {
			emit("VMOVUPS %s, %d%s", a.v(4*r+c), c*a.bytes(), row(r))
		}
	}
	emit("INCQ R9")
	emit("CMPQ R9, blocks+24(FP)")
	emit("JLT  block")
	emit("INCQ R8")
	emit("CMPQ R8, %s+16(FP)", group)
	emit("JLT  heads")
	emit("VZEROUPPER")
	emit("RET")
}

// pairAddr is row r of rows laid out stride apart from lo (rows 0, 1) and
// hi (rows 2, 3).
func pairAddr(r int, lo, hi, stride string) string {
	addr := "(" + []string{lo, hi}[r/2] + ")"
	if r%2 == 1 {
		addr += "(" + stride + "*1)"
	}
	return addr
}

func log2(n int) int {
	s := 0
	for 1<<s < n {
		s++
	}
	return s
}
