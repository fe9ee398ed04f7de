package gpukernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/kernels"
)

// experts is E random matrices of one shape stacked as an expert file
// lays them out (expert e at e·stride), on the host and the device.
type experts struct {
	host []*kernels.Matrix
	dev  *Mat
}

func randExperts(t *testing.T, r *rand.Rand, b *gpuBuf, E, rows, cols int, enc kernels.Encoding) experts {
	ex := experts{host: make([]*kernels.Matrix, E)}
	var data, scales, biases []byte
	for e := range ex.host {
		ex.host[e] = randMatrix(t, r, rows, cols, enc)
		data = append(data, ex.host[e].Data...)
		scales = append(scales, ex.host[e].Scales...)
		biases = append(biases, ex.host[e].Biases...)
	}
	ex.dev = &Mat{Rows: rows, Cols: cols, Enc: enc, Data: b.up(data), Scales: b.up(scales), Biases: b.up(biases),
		EData: int64(len(ex.host[0].Data)), EScale: int64(len(ex.host[0].Scales))}
	return ex
}

func bitwise(got, want []float32) int {
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return i
		}
	}
	return -1
}

// One MGEMV launch of Q4, Q8 (with a residual), BF16 and gathered Q4
// experts over one input gives each product bitwise what MatVecFast (the
// CPU's int8 path) and MatVec give, with 8-lane rows (8 groups) and
// 16-lane rows (17 groups).
func TestMGEMVBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, cols := range []int{512, 1088} {
		mats := []*kernels.Matrix{randMatrix(t, r, 37, cols, kernels.Q4), randMatrix(t, r, 5, cols, kernels.Q8), randMatrix(t, r, 19, cols, kernels.BF16)}
		x := randVec(r, cols, 1)
		res := randVec(r, 5, 1)
		sel := []int32{3, 0, 4}
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			ex := randExperts(t, r, b, 5, 24, cols, kernels.Q4)
			dx := b.up(cuda.Bytes(x))
			q := quantized(b, l, dx, 1, cols)
			var segs []Seg
			for i, m := range mats {
				sg := Seg{Y: b.poisoned(4 * m.Rows), M: upMat(b, m)}
				if i == 1 {
					sg.Res = b.up(cuda.Bytes(res))
				}
				segs = append(segs, sg)
			}
			segs = append(segs, Seg{Y: b.poisoned(4 * 3 * 24), M: ex.dev, Sel: b.up(cuda.Bytes(sel)), Slots: 3})
			if err := l.MGEMV(segs, dx, q, 1); err != nil {
				t.Fatal(err)
			}
			for i, m := range mats {
				want := make([]float32, m.Rows)
				kernels.MatVecFast(want, m, x)
				if i == 1 {
					for j := range want {
						want[j] += res[j]
					}
				}
				if j := bitwise(b.f32(segs[i].Y, m.Rows), want); j >= 0 {
					t.Fatalf("cols %d product %d (enc %d) row %d differs", cols, i, m.Enc, j)
				}
			}
			got := b.f32(segs[3].Y, 3*24)
			for s, e := range sel {
				want := make([]float32, 24)
				kernels.MatVecFast(want, ex.host[e], x)
				if j := bitwise(got[s*24:(s+1)*24], want); j >= 0 {
					t.Fatalf("cols %d expert slot %d row %d differs", cols, s, j)
				}
			}
		})
	}
}

// moe_down is bitwise the k gathered down products, the shared expert's
// and qwen35's combineExperts + residual add in its order, over T tokens.
func TestMoEDownBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	const E, k, T, H = 6, 3, 2, 70
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
		for _, I := range []int{128, 576} {
			sd := randMatrix(t, r, H, I, enc)
			acts := randVec(r, T*(k+1)*I, 1)
			x := randVec(r, T*H, 1)
			sel := []int32{5, 1, 2, 0, 3, 4}
			weight := []float32{0.5, 0.3, 0.2, 0.6, 0.25, 0.15}
			gate := []float32{0.7, 9, -1.3, 9}
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				ex := randExperts(t, r, b, E, H, I, enc)
				q := quantized(b, l, b.up(cuda.Bytes(acts)), T*(k+1), I)
				dxp := b.up(cuda.Bytes(x))
				if err := l.MoEDown(dxp, ex.dev, upMat(b, sd), q, b.up(cuda.Bytes(sel)), b.up(cuda.Bytes(weight)), b.up(cuda.Bytes(gate)), k, 2, T); err != nil {
					t.Fatal(err)
				}
				got := b.f32(dxp, T*H)
				for tok := range T {
					ys := make([][]float32, k+1)
					for s := range k + 1 {
						ys[s] = make([]float32, H)
						m := sd
						if s < k {
							m = ex.host[sel[tok*k+s]]
						}
						kernels.MatVecFast(ys[s], m, acts[(tok*(k+1)+s)*I:(tok*(k+1)+s+1)*I])
					}
					sg := float32(1 / (1 + math.Exp(-float64(gate[tok*2]))))
					want := make([]float32, H)
					for i := range H {
						var acc float32
						for s := range k {
							acc += float32(weight[tok*k+s] * ys[s][i])
						}
						acc += float32(sg * ys[k][i])
						want[i] = x[tok*H+i] + acc
					}
					if j := bitwise(got[tok*H:(tok+1)*H], want); j >= 0 {
						t.Fatalf("enc %d I %d token %d row %d: %v, want %v", enc, I, tok, j, got[tok*H+j], want[j])
					}
				}
			})
		}
	}
}

// Prefill's grouped expert products: moe_group lists every (token, slot)
// under its expert in ascending order, and qgemv_grouped gives each entry
// bitwise MatVecFast of its expert, for token inputs (gate, up) and
// per-slot inputs (down).
func TestGroupedExpertsBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	const E, k, T, rows, cols = 7, 3, 13, 40, 1088
	sel := make([]int32, T*k)
	for tok := range T {
		perm := r.Perm(E)[:k]
		slices.Sort(perm)
		for s, e := range perm {
			sel[tok*k+s] = int32(e)
		}
	}
	sel[0], sel[1], sel[2] = 0, 1, 2 // expert 6 may stay unused; 0 is used
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
		for _, xslot := range []bool{false, true} {
			vectors := T
			if xslot {
				vectors = T * k
			}
			xs := randVec(r, vectors*cols, 1)
			for _, v := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} { // mma, and Set.MMA2 (moe_group_seq or moe_group)
				mma, mma2 := v[0], v[1]
				if mma2 && !slices.Contains(mma2Variants(t), true) {
					continue
				}
				withGPU(t, func(b *gpuBuf, l *Launcher) {
					l.MMA = mma
					setMMA2(l, mma2)
					ex := randExperts(t, r, b, E, rows, cols, enc)
					q := quantized(b, l, b.up(cuda.Bytes(xs)), vectors, cols)
					offs, list := b.poisoned(4*(E+1)), b.poisoned(4*T*k)
					if err := l.MoEGroup(offs, list, b.up(cuda.Bytes(sel)), T*k, E); err != nil {
						t.Fatal(err)
					}
					gotOffs, gotList := make([]int32, E+1), make([]int32, T*k)
					b.c.DtoH(cuda.Bytes(gotOffs), offs)
					b.c.DtoH(cuda.Bytes(gotList), list)
					var wantList []int32
					wantOffs := []int32{0}
					for e := range E {
						for i, v := range sel {
							if int(v) == e {
								wantList = append(wantList, int32(i))
							}
						}
						wantOffs = append(wantOffs, int32(len(wantList)))
					}
					if !slices.Equal(gotOffs, wantOffs) || !slices.Equal(gotList, wantList) {
						t.Fatalf("moe_group (MMA2 %v): offs %v list %v, want %v %v", mma2, gotOffs, gotList, wantOffs, wantList)
					}
					y := b.poisoned(4 * T * k * rows)
					if err := l.GEMVGrouped(y, ex.dev, q, offs, list, k, E, xslot); err != nil {
						t.Fatal(err)
					}
					got := b.f32(y, T*k*rows)
					for i, e := range sel {
						a := i / k
						if xslot {
							a = i
						}
						want := make([]float32, rows)
						kernels.MatVecFast(want, ex.host[e], xs[a*cols:(a+1)*cols])
						if j := bitwise(got[i*rows:(i+1)*rows], want); j >= 0 {
							t.Fatalf("enc %d xslot %v mma %v MMA2 %v entry %d (expert %d) row %d differs", enc, xslot, mma, mma2, i, e, j)
						}
					}
				})
			}
		}
	}
}

// The tensor-core prefill product (qgemm_mma) gives every token bitwise
// MatVecFast, with and without a residual, at row, token and group tails.
func TestQGEMMMMABitwise(t *testing.T) {
	d, _ := device(t)
	if d.Arch < 80 {
		t.Skipf("integer mma needs sm_80, this GPU is sm_%d", d.Arch)
	}
	r := rand.New(rand.NewPCG(39, 40))
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
		for _, sh := range [][3]int{{37, 1088, 11}, {16, 64, 8}, {300, 2048, 33}, {5, 512, 2}} {
			rows, cols, T := sh[0], sh[1], sh[2]
			m := randMatrix(t, r, rows, cols, enc)
			x := randVec(r, T*cols, 1)
			res := randVec(r, T*rows, 1)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				l.MMA = true
				dx := b.up(cuda.Bytes(x))
				q := quantized(b, l, dx, T, cols)
				dm := upMat(b, m)
				y, yr := b.poisoned(4*T*rows), b.poisoned(4*T*rows)
				if err := l.GEMV(y, dm, dx, q, 0, 0, 1, false, T); err != nil {
					t.Fatal(err)
				}
				if err := l.GEMV(yr, dm, dx, q, b.up(cuda.Bytes(res)), 0, 1, false, T); err != nil {
					t.Fatal(err)
				}
				got, gotR := b.f32(y, T*rows), b.f32(yr, T*rows)
				for tok := range T {
					want := make([]float32, rows)
					kernels.MatVecFast(want, m, x[tok*cols:(tok+1)*cols])
					if j := bitwise(got[tok*rows:(tok+1)*rows], want); j >= 0 {
						t.Fatalf("enc %d %dx%d T %d token %d row %d: %v, MatVecFast %v", enc, rows, cols, T, tok, j, got[tok*rows+j], want[j])
					}
					for i := range want {
						want[i] = res[tok*rows+i] + want[i]
					}
					if j := bitwise(gotR[tok*rows:(tok+1)*rows], want); j >= 0 {
						t.Fatalf("enc %d %dx%d T %d token %d row %d with residual differs", enc, rows, cols, T, tok, j)
					}
				}
			})
		}
	}
}

// MGEMV's float rows (staged in shared memory a 4 KiB chunk at a time) are
// bitwise kernels.MatVec for rows of several chunks, a short last chunk,
// and rows that are not 16-byte aligned (copied byte by byte).
func TestMGEMVFloatRowsBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	for _, tc := range []struct {
		enc        kernels.Encoding
		rows, cols int
	}{{kernels.BF16, 33, 4104}, {kernels.F16, 9, 13}, {kernels.F32, 5, 1030}, {kernels.BF16, 17, 2048}} {
		m, m2 := randMatrix(t, r, tc.rows, tc.cols, tc.enc), randMatrix(t, r, 3, tc.cols, tc.enc)
		x := randVec(r, tc.cols, 1)
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			segs := []Seg{{Y: b.poisoned(4 * tc.rows), M: upMat(b, m)}, {Y: b.poisoned(4 * 3), M: upMat(b, m2)}}
			if err := l.MGEMV(segs, b.up(cuda.Bytes(x)), nil, 1); err != nil {
				t.Fatal(err)
			}
			for i, mm := range []*kernels.Matrix{m, m2} {
				want := make([]float32, mm.Rows)
				kernels.MatVec(want, mm, x)
				if j := bitwise(b.f32(segs[i].Y, mm.Rows), want); j >= 0 {
					t.Fatalf("enc %d %dx%d product %d row %d differs", tc.enc, mm.Rows, tc.cols, i, j)
				}
			}
		})
	}
}
