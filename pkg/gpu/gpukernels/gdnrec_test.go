package gpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
)

// Every delta-rule kernel of the split family (gdn_rec_pipe, gdn_rec_par,
// gdn_rec_reg) writes gdn_rec's outputs and state bit for bit: they run the
// same products and the same sums in the same order, only spread
// differently over the block. gdn_rec itself is held to the CPU engine by
// pkg/gpu's fidelity tests; this covers the geometries and chunk
// lengths those fixtures do not (partial column blocks, Dk < 128, T = 1).
func TestGDNRecVariantsBitwise(t *testing.T) {
	shapes := []GDNShape{
		{Hk: 2, Hv: 4, Dk: 128, Dv: 128},
		{Hk: 1, Hv: 2, Dk: 64, Dv: 96},
		{Hk: 2, Hv: 2, Dk: 32, Dv: 40},
		{Hk: 1, Hv: 3, Dk: 96, Dv: 33},
	}
	variants := []struct {
		name           string
		pipe, par, reg bool
	}{{"pipe", true, false, false}, {"par", false, true, false}, {"reg", false, true, true}}
	r := rand.New(rand.NewPCG(19, 20))
	for _, s := range shapes {
		s.C = 2*s.Hk*s.Dk + s.Hv*s.Dv
		for _, T := range []int{1, 2, 5, 9, 130} {
			conv := randVec(r, T*s.C, 1)
			ab := randVec(r, 2*T*s.Hv, 1)
			negExpA := make([]float32, s.Hv)
			for i := range negExpA {
				negExpA[i] = -float32(math.Exp(r.NormFloat64() * 0.5))
			}
			dtBias := randVec(r, s.Hv, 0.5)
			S0 := randVec(r, s.Hv*s.Dk*s.Dv, 0.1)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				dconv, da, db := b.up(cuda.Bytes(conv)), b.up(cuda.Bytes(ab[:T*s.Hv])), b.up(cuda.Bytes(ab[T*s.Hv:]))
				dn, dd := b.up(cuda.Bytes(negExpA)), b.up(cuda.Bytes(dtBias))
				run := func(pipe, par, reg bool) (o, st []float32) {
					dS := b.up(cuda.Bytes(S0))
					do := b.poisoned(4 * T * s.Hv * s.Dv)
					l2 := *l
					l2.GDNPipe, l2.GDNPar, l2.GDNReg = pipe, par, reg
					if err := l2.GDNRec(do, dS, dconv, da, db, dn, dd, s, T, s.Hv); err != nil {
						t.Fatal(err)
					}
					if err := b.c.Sync(); err != nil {
						t.Fatal(err)
					}
					return b.f32(do, T*s.Hv*s.Dv), b.f32(dS, len(S0))
				}
				wo, wS := run(false, false, false)
				for _, v := range variants {
					o, st := run(v.pipe, v.par, v.reg)
					what := fmt.Sprintf("%s, Dk %d Dv %d Hk %d Hv %d, T %d", v.name, s.Dk, s.Dv, s.Hk, s.Hv, T)
					if !slices.Equal(cuda.Bytes(o), cuda.Bytes(wo)) {
						t.Errorf("%s: outputs differ from gdn_rec's", what)
					}
					if !slices.Equal(cuda.Bytes(st), cuda.Bytes(wS)) {
						t.Errorf("%s: state differs from gdn_rec's", what)
					}
				}
			})
		}
	}
}
