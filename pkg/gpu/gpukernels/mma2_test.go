package gpukernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/kernels"
)

// The tiled kernels' arithmetic, mirrored on the host (kernels.cu's
// m2_order, m2_push, the tile list of qgemm_grouped_mma2): the tests below
// hold the mirror to the kernels' contract without a GPU.

func brev4(i int) int { return (i&1)<<3 | (i&2)<<1 | (i&4)>>1 | (i&8)>>3 }

// m2Order is m2_order: the groups class by class in bit-reversed class
// order, each class ascending.
func m2Order(G int) []int {
	var ord []int
	for i := range 16 {
		for g := brev4(i); g < G; g += 16 {
			ord = append(ord, g)
		}
	}
	return ord
}

// m2Push is m2_push: bit b of i clear parks v as the pending sum l[b];
// set, v takes l[b] in (l[b] + v) and moves up a level; past bit 3 the
// output lands in l[0].
func m2Push(i int, v float32, l *[4]float32) {
	for b := range 4 {
		if i&(1<<b) == 0 {
			l[b] = v
			return
		}
		v = l[b] + v
	}
	l[0] = v
}

// m2Sum is one output's sum of the group values v as m2_tile forms it.
func m2Sum(v []float32) float32 {
	G := len(v)
	var acc float32
	var l [4]float32
	for _, g := range m2Order(G) {
		acc = float32(acc + v[g])
		if g+16 >= G {
			i := brev4(g & 15)
			m2Push(i, acc, &l)
			acc = 0
			for i++; i < 16 && brev4(i) >= G; i++ {
				m2Push(i, 0, &l)
			}
		}
	}
	return l[0]
}

// qrowSum is the same sum as qrow / mma_tile form it: group g into partial
// g mod 16 in increasing g, then the halving fold.
func qrowSum(v []float32) float32 {
	var p [16]float32
	for g, x := range v {
		p[g%16] = float32(p[g%16] + x)
	}
	for _, h := range []int{8, 4, 2, 1} {
		for m := range h {
			p[m] = float32(p[m] + p[m+h])
		}
	}
	return p[0]
}

// The class-by-class order with the tree of pending sums adds exactly what
// qrow's 16 partials and halving fold add: bitwise for every group count
// (empty classes included), with cancellations, zeros and huge values.
func TestMMA2FoldOrderBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for G := 1; G <= 300; G++ {
		for rep := range 20 {
			v := make([]float32, G)
			for g := range v {
				switch r.IntN(8) {
				case 0:
					v[g] = 0
				case 1:
					v[g] = float32(r.NormFloat64() * 1e30)
				case 2:
					if g > 0 {
						v[g] = -v[g-1]
					}
				default:
					v[g] = float32(r.NormFloat64())
				}
			}
			if rep == 0 && G > 3 {
				v[G/2] = float32(math.Inf(1))
			}
			got, want := m2Sum(v), qrowSum(v)
			if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("G %d rep %d: %v (%#x), qrow's order gives %v (%#x)", G, rep, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
	}
	for _, G := range []int{1, 8, 17, 32, 1024} {
		ord := m2Order(G)
		if len(ord) != G {
			t.Fatalf("G %d: order has %d groups", G, len(ord))
		}
		s := slices.Clone(ord)
		slices.Sort(s)
		for g := range s {
			if s[g] != g {
				t.Fatalf("G %d: order %v is not a permutation", G, ord)
			}
		}
	}
}

// m2Tiles is qgemm_grouped_mma2's tile list: for each item (entry tile
// major, row tile minor) its expert, first entry and entry count.
func m2Tiles(offs []int32, rows int) (items [][3]int) {
	E := len(offs) - 1
	tstart := make([]int, E+1)
	for e := range E {
		tstart[e+1] = tstart[e] + (int(offs[e+1]-offs[e])+mma2GroupEntries-1)/mma2GroupEntries
	}
	rtiles := (rows + mma2GroupRows - 1) / mma2GroupRows
	for item := range tstart[E] * rtiles {
		tile := item / rtiles
		lo, hi := 0, E-1
		for lo < hi {
			mid := (lo + hi + 1) >> 1
			if tstart[mid] <= tile {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		begin := int(offs[lo]) + (tile-tstart[lo])*mma2GroupEntries
		items = append(items, [3]int{lo, begin, min(mma2GroupEntries, int(offs[lo+1])-begin)})
	}
	return items
}

// The tile list covers every (entry, row tile) once, under the entry's
// expert, with no empty tile, for experts empty, small and large, first
// and last ones empty included.
func TestMMA2TileListCoversEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	for _, counts := range [][]int{{0}, {5}, {0, 0, 33, 0}, {32, 1, 0, 64, 65, 0}, {0, 700, 0, 0, 1}} {
		for _, rows := range []int{1, 128, 300} {
			offs := []int32{0}
			for _, c := range counts {
				offs = append(offs, offs[len(offs)-1]+int32(c))
			}
			seen := map[[2]int]int{}
			for _, it := range m2Tiles(offs, rows) {
				e, begin, n := it[0], it[1], it[2]
				if n < 1 || begin < int(offs[e]) || begin+n > int(offs[e+1]) {
					t.Fatalf("counts %v: item %v lies outside expert %d's entries %d…%d", counts, it, e, offs[e], offs[e+1])
				}
				for i := begin; i < begin+n; i++ {
					seen[[2]int{i, 0}]++
				}
			}
			rt := (rows + mma2GroupRows - 1) / mma2GroupRows
			for i := range int(offs[len(offs)-1]) {
				if seen[[2]int{i, 0}] != rt {
					t.Fatalf("counts %v rows %d: entry %d in %d items, want %d", counts, rows, i, seen[[2]int{i, 0}], rt)
				}
			}
		}
	}
	_ = r
}

// The tiled kernels' shared memory fits MaxMMA2Shared for the 35B-A3B's
// shapes, and a row too long for it falls back to qgemm_mma.
func TestMMA2SharedFits(t *testing.T) {
	l := &Launcher{K: &Set{MMA2: true}}
	for _, bits := range []int{4, 8} {
		for _, cols := range []int{512, 2048, 4096} {
			if !l.mma2(cols, 0, bits) || !l.mma2(cols, 256, bits) {
				t.Errorf("%d columns of %d bits: not taken by the tiled kernels", cols, bits)
			}
		}
		if !l.mma2(8192, 0, bits) {
			t.Errorf("8192 columns of %d bits: not taken by the dense tiled kernel", bits)
		}
		if l.mma2(64*mma2MaxGroups+64, 0, bits) {
			t.Error("a row past M2_MAXG groups taken by the tiled kernels")
		}
	}
	if l.mma2(2048, mma2MaxExperts+1, 4) {
		t.Error("more experts than M2_MAXE taken by the tiled kernels")
	}
	l.OldMMA = true
	if l.mma2(2048, 0, 4) {
		t.Error("OldMMA does not keep qgemm_mma")
	}
}

// needMMA2 skips only where the tiled kernels cannot run (before sm_80);
// the tests turn them on themselves (setMMA2), whatever NVMAI_GPU_MMA2 says.
func needMMA2(t *testing.T) {
	d, s := device(t)
	if d.Arch < 80 {
		t.Skipf("integer mma needs sm_80, this GPU is sm_%d", d.Arch)
	}
	if !s.MMA2Capable() {
		t.Fatal("the tiled kernels cannot run: Load could not give them their shared memory")
	}
}

// setMMA2 gives l its own copy of the Set with MMA2 on or off (on only
// where capable), so a test's choice never reaches the shared Set.
func setMMA2(l *Launcher, on bool) {
	k := *l.K
	k.MMA2 = on && k.MMA2Capable()
	l.K = &k
}

// mma2Variants are the Set.MMA2 settings a test of a kernel with two
// variants runs: off (the kernels validated before session 17, the
// default) always, and on (session 17's) where the GPU can run it.
func mma2Variants(t *testing.T) []bool {
	if _, s := device(t); s.MMA2Capable() {
		return []bool{false, true}
	}
	return []bool{false}
}

// qgemm_mma2 (both block shapes) is bitwise qgemm_mma (every output float,
// with and without a residual) and MatVecFast, at the 35B-A3B's shapes,
// row, token and group tails, and odd token counts.
func TestQGEMMMMA2Bitwise(t *testing.T) {
	needMMA2(t)
	r := rand.New(rand.NewPCG(55, 56))
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
		for _, sh := range [][3]int{{512, 2048, 512}, {2048, 512, 33}, {8192, 2048, 7}, {2048, 4096, 511}, {37, 1088, 11}, {5, 64, 1}, {300, 2048, 65}, {130, 17 * 64, 64}, {64, 8 * 64, 2}} {
			rows, cols, T := sh[0], sh[1], sh[2]
			m := randMatrix(t, r, rows, cols, enc)
			x := randVec(r, T*cols, 1)
			res := randVec(r, T*rows, 1)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				l.MMA = true
				setMMA2(l, true)
				dx := b.up(cuda.Bytes(x))
				q := quantized(b, l, dx, T, cols)
				dm := upMat(b, m)
				dres := b.up(cuda.Bytes(res))
				run := func(old bool, tile int, res cuda.DevicePtr) []float32 {
					l.OldMMA, l.denseTile = old, tile
					y := b.poisoned(4 * T * rows)
					if err := l.GEMV(y, dm, dx, q, res, 0, 1, false, T); err != nil {
						t.Fatal(err)
					}
					return b.f32(y, T*rows)
				}
				old, oldR := run(true, 0, 0), run(true, 0, dres)
				var got []float32
				for tile := range 3 { // the grid's pick, then 64×64 and 64×32 blocks
					got = run(false, tile, 0)
					gotR := run(false, tile, dres)
					if j := bitwise(got, old); j >= 0 {
						t.Fatalf("enc %d %dx%d T %d tile %d: output %d (token %d row %d) %v, qgemm_mma %v", enc, rows, cols, T, tile, j, j/rows, j%rows, got[j], old[j])
					}
					if j := bitwise(gotR, oldR); j >= 0 {
						t.Fatalf("enc %d %dx%d T %d tile %d with residual: output %d %v, qgemm_mma %v", enc, rows, cols, T, tile, j, gotR[j], oldR[j])
					}
				}
				for tok := 0; tok < T; tok += max(1, T/17) {
					want := make([]float32, rows)
					kernels.MatVecFast(want, m, x[tok*cols:(tok+1)*cols])
					if j := bitwise(got[tok*rows:(tok+1)*rows], want); j >= 0 {
						t.Fatalf("enc %d %dx%d T %d token %d row %d: %v, MatVecFast %v", enc, rows, cols, T, tok, j, got[tok*rows+j], want[j])
					}
				}
			})
		}
	}
}

// skewedSel picks k distinct experts (ascending) for each of T tokens:
// expert hot for every token, the rest from the first used experts only,
// so the experts past used stay empty and the hot one has T entries.
func skewedSel(r *rand.Rand, T, k, used, hot int) []int32 {
	sel := make([]int32, 0, T*k)
	for range T {
		picks := []int{hot}
		for len(picks) < k {
			e := r.IntN(used)
			if !slices.Contains(picks, e) {
				picks = append(picks, e)
			}
		}
		slices.Sort(picks)
		for _, e := range picks {
			sel = append(sel, int32(e))
		}
	}
	return sel
}

// qgemm_grouped_mma2 is bitwise qgemm_grouped_mma (every output float) and
// MatVecFast of each entry's expert, for token inputs (gate, up: 512×2048)
// and per-slot inputs (down: 2048×512), with skewed expert counts (one
// expert in every token, many empty), odd token counts and a single token.
func TestGroupedMMA2Bitwise(t *testing.T) {
	needMMA2(t)
	r := rand.New(rand.NewPCG(57, 58))
	for _, tc := range []struct {
		E, k, T, rows, cols, used, hot int
		xslot                          bool
	}{
		{48, 8, 511, 512, 2048, 30, 7, false},
		{48, 8, 33, 2048, 512, 20, 0, true},
		{16, 4, 1, 512, 2048, 16, 15, false},
		{7, 3, 13, 40, 1088, 7, 2, true},
		{5, 2, 512, 130, 64 * 17, 4, 3, false},
	} {
		for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
			n := tc.T * tc.k
			sel := skewedSel(r, tc.T, tc.k, tc.used, tc.hot)
			vectors := tc.T
			if tc.xslot {
				vectors = n
			}
			xs := randVec(r, vectors*tc.cols, 1)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				l.MMA = true
				setMMA2(l, true)
				ex := randExperts(t, r, b, tc.E, tc.rows, tc.cols, enc)
				q := quantized(b, l, b.up(cuda.Bytes(xs)), vectors, tc.cols)
				offs, list := b.poisoned(4*(tc.E+1)), b.poisoned(4*n)
				if err := l.MoEGroup(offs, list, b.up(cuda.Bytes(sel)), n, tc.E); err != nil {
					t.Fatal(err)
				}
				run := func(old bool) []float32 {
					l.OldMMA = old
					y := b.poisoned(4 * n * tc.rows)
					if err := l.GEMVGrouped(y, ex.dev, q, offs, list, tc.k, tc.E, tc.xslot); err != nil {
						t.Fatal(err)
					}
					return b.f32(y, n*tc.rows)
				}
				got, old := run(false), run(true)
				if j := bitwise(got, old); j >= 0 {
					t.Fatalf("enc %d %+v: entry %d row %d %v, qgemm_grouped_mma %v", enc, tc, j/tc.rows, j%tc.rows, got[j], old[j])
				}
				for i := 0; i < n; i += max(1, n/40) {
					a := i / tc.k
					if tc.xslot {
						a = i
					}
					want := make([]float32, tc.rows)
					kernels.MatVecFast(want, ex.host[sel[i]], xs[a*tc.cols:(a+1)*tc.cols])
					if j := bitwise(got[i*tc.rows:(i+1)*tc.rows], want); j >= 0 {
						t.Fatalf("enc %d %+v: entry %d (expert %d) row %d %v, MatVecFast %v", enc, tc, i, sel[i], j, got[i*tc.rows+j], want[j])
					}
				}
			})
		}
	}
}

// fgemm_tiled (multi-token float products: the router in prefill) is
// bitwise fgemv and kernels.MatVec for BF16, F16 and F32 rows, with column
// tails inside a staged chunk, row and token tails, and a residual.
func TestFGEMMTiledBitwise(t *testing.T) {
	if _, s := device(t); !s.MMA2Capable() {
		t.Skip("the tiled products cannot run: no shared memory for them")
	}
	r := rand.New(rand.NewPCG(59, 60))
	for _, enc := range []kernels.Encoding{kernels.BF16, kernels.F16, kernels.F32} {
		for _, sh := range [][3]int{{257, 2048, 512}, {256, 2048, 33}, {33, 100, 7}, {1, 13, 2}, {40, 4104, 65}} {
			rows, cols, T := sh[0], sh[1], sh[2]
			m := randMatrix(t, r, rows, cols, enc)
			x := randVec(r, T*cols, 1)
			res := randVec(r, T*rows, 1)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				setMMA2(l, true)
				dm, dx, dres := upMat(b, m), b.up(cuda.Bytes(x)), b.up(cuda.Bytes(res))
				run := func(old bool, res cuda.DevicePtr) []float32 {
					l.OldMMA = old
					y := b.poisoned(4 * T * rows)
					if err := l.GEMV(y, dm, dx, nil, res, 0, 1, false, T); err != nil {
						t.Fatal(err)
					}
					return b.f32(y, T*rows)
				}
				got, gotR, old, oldR := run(false, 0), run(false, dres), run(true, 0), run(true, dres)
				if j := bitwise(got, old); j >= 0 {
					t.Fatalf("enc %d %dx%d T %d: output %d %v, fgemv %v", enc, rows, cols, T, j, got[j], old[j])
				}
				if j := bitwise(gotR, oldR); j >= 0 {
					t.Fatalf("enc %d %dx%d T %d with residual: output %d %v, fgemv %v", enc, rows, cols, T, j, gotR[j], oldR[j])
				}
				for tok := 0; tok < T; tok += max(1, T/9) {
					want := make([]float32, rows)
					kernels.MatVec(want, m, x[tok*cols:(tok+1)*cols])
					if j := bitwise(got[tok*rows:(tok+1)*rows], want); j >= 0 {
						t.Fatalf("enc %d %dx%d T %d token %d row %d: %v, MatVec %v", enc, rows, cols, T, tok, j, got[tok*rows+j], want[j])
					}
				}
			})
		}
	}
}

// moe_group's lists (counts, scan, then places by warp-level ranks, 1,024
// entries at a time) and moe_group_seq's (Set.MMA2 off) equal the host's: every expert's entries ascending,
// over several tiles of entries, with a hot expert, empty experts, 1,024
// experts, and a single entry.
func TestMoEGroupLists(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 64))
	for _, tc := range []struct{ E, k, T, used, hot int }{
		{256, 8, 511, 200, 9}, {256, 8, 512, 256, 255}, {1024, 8, 300, 1024, 1023}, {64, 4, 1, 64, 0}, {8, 8, 700, 8, 3},
	} {
		sel := skewedSel(r, tc.T, tc.k, tc.used, tc.hot)
		n := len(sel)
		var wantList []int32
		wantOffs := []int32{0}
		for e := range tc.E {
			for i, v := range sel {
				if int(v) == e {
					wantList = append(wantList, int32(i))
				}
			}
			wantOffs = append(wantOffs, int32(len(wantList)))
		}
		for _, mma2 := range mma2Variants(t) { // moe_group_seq, then moe_group
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				setMMA2(l, mma2)
				offs, list := b.poisoned(4*(tc.E+1)), b.poisoned(4*n)
				if err := l.MoEGroup(offs, list, b.up(cuda.Bytes(sel)), n, tc.E); err != nil {
					t.Fatal(err)
				}
				gotOffs, gotList := make([]int32, tc.E+1), make([]int32, n)
				b.c.DtoH(cuda.Bytes(gotOffs), offs)
				b.c.DtoH(cuda.Bytes(gotList), list)
				if !slices.Equal(gotOffs, wantOffs) {
					t.Fatalf("%+v MMA2 %v: offsets differ", tc, mma2)
				}
				if !slices.Equal(gotList, wantList) {
					for i := range wantList {
						if gotList[i] != wantList[i] {
							t.Fatalf("%+v MMA2 %v: list[%d] = %d, want %d", tc, mma2, i, gotList[i], wantList[i])
						}
					}
				}
			})
		}
	}
}

// ldmatrixX4 is ldmatrix.m8n8.x4.b16 on a byte-addressed shared memory:
// lane l's register q is row l/4, bytes 4·(l%4)… of the 8×16-byte matrix
// whose row addresses lanes 8q … 8q+7 give.
func ldmatrixX4(smem []uint32, addr func(lane int) int) (regs [32][4]uint32) {
	for l := range 32 {
		for q := range 4 {
			regs[l][q] = smem[(addr(8*q+l/4)+4*(l%4))/4]
		}
	}
	return
}

// The tiles m2_tile stages (16-byte chunks XOR-swizzled) give each lane,
// through ldmatrix, the A and B words mma_tile loads from global memory:
// rows gid and gid+8 at words tq and tq+4 (and 8+ for a Q8 group's second
// half), tokens gid at words tq, tq+4, 8+tq, 12+tq. Each word is tagged
// (row or token)·16 + word.
func TestMMA2FragmentsFromSwizzledTiles(t *testing.T) {
	const rows, toks = 64, 32
	for _, bits := range []int{4, 8} {
		WB := bits * 8
		cpr := WB / 16
		sw := make([]uint32, rows*WB/4)
		for row := range rows { // the producer's placement (load in m2_tile)
			for c := range cpr {
				pc := c ^ (row>>2)&1
				if cpr == 4 {
					pc = c ^ (row>>1)&3
				}
				for k := range 4 {
					sw[(row*WB+pc*16)/4+k] = uint32(row*16 + 4*c + k)
				}
			}
		}
		for _, base := range []int{0, 16, 32, 48} { // a warp's 16-row block
			for h := range bits / 4 {
				regs := ldmatrixX4(sw, func(lane int) int {
					row := base + lane&15
					c := lane >> 4
					if bits == 8 {
						c = 2*h + lane>>4
						return row*64 + (c^(row>>1)&3)*16
					}
					return row*32 + (c^(row>>2)&1)*16
				})
				for l := range 32 {
					gid, tq := l/4, l%4
					want := [4]int{(base+gid)*16 + 8*h + tq, (base+gid+8)*16 + 8*h + tq, (base+gid)*16 + 8*h + tq + 4, (base+gid+8)*16 + 8*h + tq + 4}
					for q := range 4 {
						if int(regs[l][q]) != want[q] {
							t.Fatalf("Q%d rows %d half %d lane %d A[%d]: word %d, want %d", bits, base, h, l, q, regs[l][q], want[q])
						}
					}
				}
			}
		}
		sx := make([]uint32, toks*64/4)
		for tok := range toks {
			for c := range 4 {
				pc := c ^ (tok>>1)&3
				for k := range 4 {
					sx[(tok*64+pc*16)/4+k] = uint32(tok*16 + 4*c + k)
				}
			}
		}
		for base := 0; base < toks; base += 8 {
			regs := ldmatrixX4(sx, func(lane int) int {
				tok, c := base+lane&7, lane>>3
				return tok*64 + (c^(tok>>1)&3)*16
			})
			for l := range 32 {
				gid, tq := l/4, l%4
				for q, w := range []int{tq, tq + 4, 8 + tq, 12 + tq} {
					if want := (base+gid)*16 + w; int(regs[l][q]) != want {
						t.Fatalf("tokens %d lane %d B[%d]: word %d, want %d", base, l, q, regs[l][q], want)
					}
				}
			}
		}
	}
}
