package gpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

// The batched decode step's mixer launches (gdn_conv_rows,
// gdn_rec_reg_rows) give each row, outputs and its own state, the bits of
// the one-token launch on that row alone, for 1, 3 and 16 rows (the rows'
// states scattered, the a and b rows interleaved as the ab product lays
// them), geometries with partial column blocks and Dk < 128 included.
func TestMixerRowsBitwiseOneTokenLaunches(t *testing.T) {
	shapes := []GDNShape{
		{Hk: 2, Hv: 4, Dk: 128, Dv: 128},
		{Hk: 1, Hv: 2, Dk: 64, Dv: 96},
		{Hk: 1, Hv: 3, Dk: 96, Dv: 33},
	}
	r := rand.New(rand.NewPCG(23, 24))
	for _, s := range shapes {
		s.C = 2*s.Hk*s.Dk + s.Hv*s.Dv
		for _, N := range []int{1, 3, MaxRows} {
			for _, K := range []int{4, 3} {
				what := fmt.Sprintf("Dk %d Dv %d Hk %d Hv %d, %d rows, %d taps", s.Dk, s.Dv, s.Hk, s.Hv, N, K)
				proj := randVec(r, N*s.C, 1)
				w := randVec(r, s.C*K, 1)
				abStride := 2 * s.Hv
				ab := randVec(r, N*abStride, 1)
				negExpA := make([]float32, s.Hv)
				for i := range negExpA {
					negExpA[i] = -float32(math.Exp(r.NormFloat64() * 0.5))
				}
				dtBias := randVec(r, s.Hv, 0.5)
				convStates := make([][]float32, N)
				recStates := make([][]float32, N)
				for i := range N {
					convStates[i] = randVec(r, (K-1)*s.C, 1)
					recStates[i] = randVec(r, s.Hv*s.Dk*s.Dv, 0.1)
				}
				withGPU(t, func(b *gpuBuf, l *Launcher) {
					l.GDNPipe, l.GDNPar, l.GDNReg = true, true, true
					dproj, dw, dab := b.up(cuda.Bytes(proj)), b.up(cuda.Bytes(w)), b.up(cuda.Bytes(ab))
					dn, dd := b.up(cuda.Bytes(negExpA)), b.up(cuda.Bytes(dtBias))
					da, db := dab, dab+cuda.DevicePtr(4*s.Hv)
					run := func(rows bool) (conv, o []float32, cs, rs [][]float32) {
						convS, recS := make([]cuda.DevicePtr, N), make([]cuda.DevicePtr, N)
						for i := range N {
							convS[i], recS[i] = b.up(cuda.Bytes(convStates[i])), b.up(cuda.Bytes(recStates[i]))
						}
						dconv := b.poisoned(4 * N * s.C)
						do := b.poisoned(4 * N * s.Hv * s.Dv)
						row := func(p cuda.DevicePtr, i, width int) cuda.DevicePtr { return p + cuda.DevicePtr(4*i*width) }
						if rows {
							if err := l.GDNConvRows(dconv, dproj, convS, dw, s.C, K); err != nil {
								t.Fatal(err)
							}
							ok, err := l.GDNRecRows(do, recS, dconv, da, db, dn, dd, s, abStride)
							if err != nil || !ok {
								t.Fatalf("%s: GDNRecRows ran %v: %v", what, ok, err)
							}
						} else {
							for i := range N {
								if err := l.GDNConv(row(dconv, i, s.C), row(dproj, i, s.C), convS[i], dw, s.C, K, 1); err != nil {
									t.Fatal(err)
								}
							}
							for i := range N {
								if err := l.GDNRec(row(do, i, s.Hv*s.Dv), recS[i], row(dconv, i, s.C), row(da, i, abStride), row(db, i, abStride), dn, dd, s, 1, abStride); err != nil {
									t.Fatal(err)
								}
							}
						}
						if err := b.c.Sync(); err != nil {
							t.Fatal(err)
						}
						for i := range N {
							cs = append(cs, b.f32(convS[i], (K-1)*s.C))
							rs = append(rs, b.f32(recS[i], s.Hv*s.Dk*s.Dv))
						}
						return b.f32(dconv, N*s.C), b.f32(do, N*s.Hv*s.Dv), cs, rs
					}
					wc, wo, wcs, wrs := run(false)
					gc, gout, gcs, grs := run(true)
					if !slices.Equal(cuda.Bytes(gc), cuda.Bytes(wc)) {
						t.Errorf("%s: gdn_conv_rows' outputs differ from gdn_conv's row by row", what)
					}
					if !slices.Equal(cuda.Bytes(gout), cuda.Bytes(wo)) {
						t.Errorf("%s: gdn_rec_reg_rows' outputs differ from gdn_rec's row by row", what)
					}
					for i := range N {
						if !slices.Equal(cuda.Bytes(gcs[i]), cuda.Bytes(wcs[i])) {
							t.Errorf("%s: row %d's conv state differs", what, i)
						}
						if !slices.Equal(cuda.Bytes(grs[i]), cuda.Bytes(wrs[i])) {
							t.Errorf("%s: row %d's delta-rule state differs", what, i)
						}
					}
				})
			}
		}
	}
}

// rowPtrs refuses no rows and more than MaxRows (host only).
func TestRowPtrsBounds(t *testing.T) {
	for _, n := range []int{0, MaxRows + 1} {
		if _, err := rowPtrs(make([]cuda.DevicePtr, n)); err == nil {
			t.Errorf("%d rows: no error", n)
		}
	}
	tab, err := rowPtrs([]cuda.DevicePtr{7, 9})
	if err != nil || len(tab) != 8*MaxRows || tab[0] != 7 || tab[8] != 9 {
		t.Errorf("table %v, %v", tab, err)
	}
}
