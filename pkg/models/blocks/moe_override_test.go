package blocks

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// overrideBench is a small MoE block with float32 weights and experts held
// in memory, recording the ids each Acquire asks for.
type overrideBench struct {
	moe     MoE
	w       MoEWeights
	experts *heldExperts
	pool    *kernels.Pool
}

type heldExperts struct {
	mats  []model.ExpertMats
	got   [][]int
	out   []model.ExpertMats
	noRec bool
}

func (h *heldExperts) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	if !h.noRec {
		h.got = append(h.got, slices.Clone(ids))
	}
	h.out = h.out[:0]
	for _, e := range ids {
		h.out = append(h.out, h.mats[e])
	}
	return h.out, releaseNothing, nil
}

func releaseNothing() {}

func randomMatrix(rng *rand.Rand, rows, cols int) *kernels.Matrix {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64()) / 4
	}
	return &kernels.Matrix{Rows: rows, Cols: cols, Enc: kernels.F32, Data: unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))}
}

func newOverrideBench(t *testing.T, E, k, H, I int) *overrideBench {
	rng := rand.New(rand.NewPCG(3, 7))
	b := &overrideBench{pool: kernels.NewPool(2), experts: &heldExperts{}}
	t.Cleanup(b.pool.Close)
	for range E {
		b.experts.mats = append(b.experts.mats, model.ExpertMats{Gate: randomMatrix(rng, I, H), Up: randomMatrix(rng, I, H), Down: randomMatrix(rng, H, I)})
	}
	b.w = MoEWeights{Router: randomMatrix(rng, E, H), SharedGate: randomMatrix(rng, 1, H),
		Shared: MLPWeights{Gate: randomMatrix(rng, I, H), Up: randomMatrix(rng, I, H), Down: randomMatrix(rng, H, I)}}
	b.moe = MoE{Name: "test", Pool: b.pool, Experts: b.experts, NumExperts: E, TopK: k, Hidden: H, Intermediate: I}
	return b
}

// fixedRoutes is a RouteOverride naming, for each position, the k experts
// the router ranks lowest (so never its own pick), in descending id order.
type fixedRoutes struct {
	logits func(pos int) []float32
	k      int
	asked  [][2]int
}

func (f *fixedRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	f.asked = append(f.asked, [2]int{pos, layer})
	lg := f.logits(pos)
	neg := make([]float32, len(lg))
	for i, v := range lg {
		neg[i] = -v
	}
	ids := TopIndices(neg, f.k, nil)
	slices.Sort(ids)
	slices.Reverse(ids)
	return append(dst[:0], ids...), nil
}

// TestMoEOverrideUsesTheGivenExperts: with an override the block asks the
// experts for exactly the ids it names, weights them by the router's
// softmax at those ids renormalised over them (computed here from the
// logits), and its output is the weighted sum of those experts plus the
// gated shared expert, for a decode step and for a pass long enough to
// route on the pool's threads.
func TestMoEOverrideUsesTheGivenExperts(t *testing.T) {
	const E, k, H, I, layer, pos0 = 12, 3, 16, 8, 4, 5
	for _, T := range []int{1, parallelMinTokens + 3} {
		b := newOverrideBench(t, E, k, H, I)
		rng := rand.New(rand.NewPCG(uint64(T), 1))
		u := make([]float32, T*H)
		for i := range u {
			u[i] = float32(rng.NormFloat64())
		}
		logits := make([]float32, T*E)
		MatMul(b.pool, logits, b.w.Router, u, T)
		routes := &fixedRoutes{k: k, logits: func(pos int) []float32 { return logits[(pos-pos0)*E : (pos-pos0+1)*E] }}
		sc := &MoEScratch{Override: routes, Pos: pos0}
		out := make([]float32, T*H)
		if err := b.moe.Block(layer, &b.w, sc, u, out, T); err != nil {
			t.Fatal(err)
		}

		var union []int
		for tok := range T {
			if got := routes.asked[tok]; got != [2]int{pos0 + tok, layer} {
				t.Fatalf("T=%d: the override was asked for (position, layer) %v, want %v", T, got, [2]int{pos0 + tok, layer})
			}
			want, _ := routes.Experts(pos0+tok, layer, nil)
			slices.Sort(want)
			if got := sc.sel[tok*k : (tok+1)*k]; !slices.Equal(got, want) {
				t.Fatalf("T=%d token %d: routed to %v, want %v", T, tok, got, want)
			}
			union = append(union, want...)
			wantW := softmaxAt(logits[tok*E:(tok+1)*E], want)
			if i := bitwiseDiff(sc.weight[tok*k:(tok+1)*k], wantW); i >= 0 {
				t.Fatalf("T=%d token %d slot %d: weight %v, want %v", T, tok, i, sc.weight[tok*k+i], wantW[i])
			}
			ref := referenceMoE(b, u[tok*H:(tok+1)*H], want, wantW)
			for i := range H {
				if d := math.Abs(float64(out[tok*H+i] - ref[i])); d > 1e-5*(1+math.Abs(float64(ref[i]))) {
					t.Fatalf("T=%d token %d column %d: output %v, reference %v", T, tok, i, out[tok*H+i], ref[i])
				}
			}
		}
		slices.Sort(union)
		union = slices.Compact(union)
		if len(b.experts.got) != 1 || !slices.Equal(b.experts.got[0], union) {
			t.Fatalf("T=%d: the block acquired %v, want once %v", T, b.experts.got, union)
		}
	}
}

// softmaxAt is the router's float64 softmax rounded to float32 at ids,
// each over their float32 sum taken in ids' order.
func softmaxAt(logits []float32, ids []int) []float32 {
	mx := math.Inf(-1)
	for _, l := range logits {
		mx = math.Max(mx, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - mx)
	}
	p := make([]float32, len(ids))
	var total float32
	for i, e := range ids {
		p[i] = float32(math.Exp(float64(logits[e])-mx) / sum)
		total += p[i]
	}
	for i := range p {
		p[i] /= total
	}
	return p
}

// referenceMoE is one token's MoE output as the architecture writes it:
// Σ weight·expert(x) in ascending id order, plus σ(shared gate·x)·shared(x).
func referenceMoE(b *overrideBench, x []float32, ids []int, weight []float32) []float32 {
	H := len(x)
	mlp := func(gate, up, down *kernels.Matrix) []float32 {
		g, u := make([]float32, gate.Rows), make([]float32, up.Rows)
		MatMul(b.pool, g, gate, x, 1)
		MatMul(b.pool, u, up, x, 1)
		for i := range g {
			g[i] = g[i] / (1 + float32(math.Exp(-float64(g[i])))) * u[i]
		}
		out := make([]float32, H)
		MatMul(b.pool, out, down, g, 1)
		return out
	}
	acc := make([]float32, H)
	for s, e := range ids {
		em := b.experts.mats[e]
		for i, v := range mlp(em.Gate, em.Up, em.Down) {
			acc[i] += weight[s] * v
		}
	}
	gate := make([]float32, 1)
	MatMul(b.pool, gate, b.w.SharedGate, x, 1)
	sigma := float32(1 / (1 + math.Exp(-float64(gate[0]))))
	for i, v := range mlp(b.w.Shared.Gate, b.w.Shared.Up, b.w.Shared.Down) {
		acc[i] += sigma * v
	}
	return acc
}

// routerOwn is a RouteOverride naming the router's own top-k.
type routerOwn struct {
	logits []float32
	E      int
}

func (r *routerOwn) Experts(pos, layer int, dst []int) ([]int, error) {
	probs, sel, w := make([]float32, r.E), make([]int, 2), make([]float32, 2)
	Route(r.logits[pos*r.E:(pos+1)*r.E], probs, sel, w)
	return append(dst[:0], sel...), nil
}

// TestMoEOverrideOfTheRouterOwnPickIsBitwise: an override naming what the
// router picks anyway gives bitwise the output of no override, so the
// override replaces the choice of ids and nothing else.
func TestMoEOverrideOfTheRouterOwnPickIsBitwise(t *testing.T) {
	const E, k, H, I = 12, 2, 16, 8
	for _, T := range []int{1, parallelMinTokens + 1} {
		b := newOverrideBench(t, E, k, H, I)
		rng := rand.New(rand.NewPCG(9, uint64(T)))
		u := make([]float32, T*H)
		for i := range u {
			u[i] = float32(rng.NormFloat64())
		}
		logits := make([]float32, T*E)
		MatMul(b.pool, logits, b.w.Router, u, T)
		plain, over := make([]float32, T*H), make([]float32, T*H)
		if err := b.moe.Block(0, &b.w, new(MoEScratch), u, plain, T); err != nil {
			t.Fatal(err)
		}
		if err := b.moe.Block(0, &b.w, &MoEScratch{Override: &routerOwn{logits: logits, E: E}}, u, over, T); err != nil {
			t.Fatal(err)
		}
		if i := bitwiseDiff(over, plain); i >= 0 {
			t.Fatalf("T=%d: index %d: %v with the override, %v without", T, i, over[i], plain[i])
		}
	}
}

// badRoutes returns ids (or err) whatever it is asked.
type badRoutes struct {
	ids []int
	err error
}

func (b badRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	return append(dst[:0], b.ids...), b.err
}

// TestMoEOverrideRefusesBadIds: an override naming the wrong number of
// experts, one out of range or one twice, or failing, stops the block with
// an error naming the layer and position.
func TestMoEOverrideRefusesBadIds(t *testing.T) {
	const E, k, H, I = 8, 2, 16, 8
	for _, tc := range []struct {
		name string
		o    badRoutes
		want string
	}{
		{"too few", badRoutes{ids: []int{1}}, "named 1 experts, the model routes each token to 2"},
		{"too many", badRoutes{ids: []int{1, 2, 3}}, "named 3 experts"},
		{"out of range", badRoutes{ids: []int{1, 8}}, "named expert 8; the layer has experts 0 to 7"},
		{"negative", badRoutes{ids: []int{-1, 3}}, "named expert -1"},
		{"twice", badRoutes{ids: []int{5, 5}}, "named expert 5 twice"},
		{"source error", badRoutes{err: errors.New("trace.txt line 9: layer 3 missing")}, "trace.txt line 9: layer 3 missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newOverrideBench(t, E, k, H, I)
			u, out := make([]float32, H), make([]float32, H)
			err := b.moe.Block(3, &b.w, &MoEScratch{Override: tc.o, Pos: 41}, u, out, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "layer 3, position 41") {
				t.Fatalf("error %v, want one naming layer 3, position 41 and %q", err, tc.want)
			}
			if len(b.experts.got) != 0 {
				t.Fatalf("the block acquired %v after a bad override", b.experts.got)
			}
		})
	}
}

// reuseRoutes names the same experts every time without allocating.
type reuseRoutes struct{ ids []int }

func (r reuseRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	return append(dst[:0], r.ids...), nil
}

// TestMoEDecodeStepAllocatesNothing: a decode step's block, with or
// without an override, allocates nothing once its scratch has grown.
func TestMoEDecodeStepAllocatesNothing(t *testing.T) {
	const E, k, H, I = 8, 2, 16, 8
	b := newOverrideBench(t, E, k, H, I)
	b.experts.noRec = true
	u, out := make([]float32, H), make([]float32, H)
	for _, sc := range []*MoEScratch{new(MoEScratch), {Override: reuseRoutes{ids: []int{6, 1}}}} {
		step := func() {
			if err := b.moe.Block(0, &b.w, sc, u, out, 1); err != nil {
				t.Fatal(err)
			}
		}
		step()
		if n := testing.AllocsPerRun(20, step); n != 0 {
			t.Errorf("override %v: %v allocations per step", sc.Override, n)
		}
	}
}
