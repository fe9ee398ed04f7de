package gpukernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
)

// setAttnTiled is setMMA2 for Set.AttnTiled: a copy of the set, so the
// shared one keeps its setting.
func setAttnTiled(l *Launcher, on bool) {
	k := *l.K
	k.AttnTiled = on && k.AttnTiledCapable()
	l.K = &k
}

// The tiled prefill attention (Set.AttnTiled: attn_qnorm, attn_scores_t*,
// attn_softmax_t, attn_values_t*) is bitwise the row kernels (attn_scores,
// attn_values and their 8- and 16-bit widths) on every head shape the
// attention tests use plus one whose head is no multiple of 4 (the scores'
// tail on lane 0), for chunks from position 0 and later ones, chunks that
// end inside a tile and span several, grouped queries that split a tile
// between tokens, and a context past attn_values' shared-memory weights
// (10,240 positions, where the row kernel computes each weight as it goes).
func TestAttnTiledIsBitwiseTheRowKernels(t *testing.T) {
	_, set := device(t)
	if !set.AttnTiledCapable() {
		t.Skip("this GPU cannot give attn_scores_t its shared memory")
	}
	r := rand.New(rand.NewPCG(91, 92))
	shapes := append(append([]AttnShape(nil), attnShapes...), AttnShape{Hq: 6, Hkv: 2, Dh: 38, Half: 6})
	for _, s := range shapes {
		for _, c := range []struct {
			name    string
			pos0, T int
		}{{"first", 0, 24}, {"later", 5, 24}, {"tiles", 70, 45}, {"short", 3, 2}, {"long", 10300, 3}} {
			if c.name == "long" && s.Dh != 256 {
				continue
			}
			capacity := c.pos0 + c.T + 3
			kvd := s.Hkv * s.Dh
			in := newAttnInputs(r, s, c.pos0, c.T, capacity)
			for _, bits := range []int{model.KVFloat32, model.KVInt8, model.KVBF16} {
				t.Run(fmt.Sprintf("Hq%d-Hkv%d-Dh%d/%s/%dbit", s.Hq, s.Hkv, s.Dh, c.name, bits), func(t *testing.T) {
					k, v := randomNarrowCache(r, bits, capacity, kvd, s.Dh), randomNarrowCache(r, bits, capacity, kvd, s.Dh)
					withGPU(t, func(b *gpuBuf, l *Launcher) {
						kv := upKV(b, k, v, bits)
						setAttnTiled(l, false)
						want := in.run(t, b, l, kv)
						setAttnTiled(l, true)
						n0 := l.Count
						got := in.run(t, b, l, kv)
						if l.Count-n0 != 4 {
							t.Fatalf("the tiled path made %d launches, want 4 (qnorm, scores, softmax, values)", l.Count-n0)
						}
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								tok, rest := i/(s.Hq*s.Dh), i%(s.Hq*s.Dh)
								t.Fatalf("token %d head %d dim %d: tiled %g, row kernels %g (max |Δ| %g)", tok, rest/s.Dh, rest%s.Dh, got[i], want[i], maxDiff(got, want))
							}
						}
					})
				})
			}
		}
	}
}
