package gpukernels

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/kernels"
)

// MGEMVNorm (mgemv_n: RMSNorm, quantization and the products in one
// launch, Set.NormFold) is bitwise RMSNormQuantize then MGEMV: every
// product (Q4; Q8 with a residual; BF16 and F32 rows, which read the
// normed row; gathered Q4 experts), the normed row u and its quantization,
// at rows whose norm block is 256, 512 and 1024 threads (the float64 sum
// of squares in that block's order), for one token and several.
func TestMGEMVNormIsBitwiseTheTwoLaunches(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, cols := range []int{128, 512, 1088, 2048} {
		for _, T := range []int{1, 3} {
			t.Run(fmt.Sprintf("cols%d/T%d", cols, T), func(t *testing.T) {
				mats := []*kernels.Matrix{randMatrix(t, r, 37, cols, kernels.Q4), randMatrix(t, r, 5, cols, kernels.Q8),
					randMatrix(t, r, 19, cols, kernels.BF16), randMatrix(t, r, 9, cols, kernels.F32)}
				x := randVec(r, T*cols, 3)
				x[cols/2] = 40 // a wide row: the quantization's scale is one value's
				scale := randVec(r, cols, 1)
				res := randVec(r, T*5, 1)
				sel := make([]int32, 3*T)
				for i := range sel {
					sel[i] = int32(r.IntN(5))
				}
				withGPU(t, func(b *gpuBuf, l *Launcher) {
					ex := randExperts(t, r, b, 5, 24, cols, kernels.Q4)
					dx, dscale := b.up(cuda.Bytes(x)), b.up(cuda.Bytes(scale))
					dres, dsel := b.up(cuda.Bytes(res)), b.up(cuda.Bytes(sel))
					segsFor := func() []Seg {
						var segs []Seg
						for i, m := range mats {
							sg := Seg{Y: b.poisoned(4 * T * m.Rows), M: upMat(b, m)}
							if i == 1 {
								sg.Res = dres
							}
							segs = append(segs, sg)
						}
						return append(segs, Seg{Y: b.poisoned(4 * T * 3 * 24), M: ex.dev, Sel: dsel, Slots: 3})
					}
					q8, q4, ds := QActBytes(T, cols)
					qact := func() *QAct {
						return &QAct{Q8: b.poisoned(int(q8)), Q4: b.poisoned(int(q4)), DX: b.poisoned(int(ds)), SX: b.poisoned(int(ds))}
					}
					wantSegs, wantQ, wantU := segsFor(), qact(), b.poisoned(4*T*cols)
					if err := l.RMSNormQuantize(wantQ, wantU, dx, dscale, cols, T, 1e-6); err != nil {
						t.Fatal(err)
					}
					if err := l.MGEMV(wantSegs, wantU, wantQ, T); err != nil {
						t.Fatal(err)
					}
					gotSegs, gotQ, gotU := segsFor(), qact(), b.poisoned(4*T*cols)
					n0 := l.Count
					if err := l.MGEMVNorm(gotSegs, gotQ, gotU, dx, dscale, cols, T, 1e-6); err != nil {
						t.Fatal(err)
					}
					if l.Count != n0+1 {
						t.Fatalf("MGEMVNorm made %d launches, want 1", l.Count-n0)
					}
					for i, sg := range wantSegs {
						n := T * sg.M.Rows * max(sg.Slots, 1)
						if j := bitwise(b.f32(gotSegs[i].Y, n), b.f32(sg.Y, n)); j >= 0 {
							t.Fatalf("product %d (enc %d) value %d differs", i, sg.M.Enc, j)
						}
					}
					if j := bitwise(b.f32(gotU, T*cols), b.f32(wantU, T*cols)); j >= 0 {
						t.Fatalf("normed row value %d differs", j)
					}
					raw := func(p cuda.DevicePtr, n int64) []byte {
						out := make([]byte, n)
						if err := b.c.DtoH(out, p); err != nil {
							t.Fatal(err)
						}
						return out
					}
					for _, c := range []struct {
						name      string
						got, want cuda.DevicePtr
						n         int64
					}{{"q8", gotQ.Q8, wantQ.Q8, q8}, {"q4", gotQ.Q4, wantQ.Q4, q4}, {"dx", gotQ.DX, wantQ.DX, ds}, {"sx", gotQ.SX, wantQ.SX, ds}} {
						if !bytes.Equal(raw(c.got, c.n), raw(c.want, c.n)) {
							t.Fatalf("the stored quantization's %s differs", c.name)
						}
					}
				})
			})
		}
	}
}
