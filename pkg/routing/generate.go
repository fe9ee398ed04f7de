package routing

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Regime is a kind of workload whose routing locality the generator
// imitates (docs/routing.md gives the published numbers each is tuned to).
type Regime string

const (
	Diverse Regime = "diverse" // short, varied text: Qwen3-30B LRU-51 ≈ 90%
	Agent   Regime = "agent"   // a long agent session: repetitive code and tool output
	Uniform Regime = "uniform" // no locality: what a random-weight install does
)

// Regimes lists the regimes ParseSpec accepts.
var Regimes = []Regime{Diverse, Agent, Uniform}

// ParseRegime accepts a regime's name.
func ParseRegime(s string) (Regime, error) {
	for _, r := range Regimes {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("routing regime %q is not known; choose diverse, agent or uniform", s)
}

// Spec names a synthetic routing source: a regime and a seed.
type Spec struct {
	Regime Regime
	Seed   uint64
}

func (s Spec) String() string { return fmt.Sprintf("synthetic %s seed=%d", s.Regime, s.Seed) }

// ParseSpec reads the bench flag's form "synthetic:REGIME[:seed=N]"; the
// seed defaults to 1.
func ParseSpec(s string) (Spec, error) {
	parts := strings.Split(s, ":")
	if parts[0] != "synthetic" || len(parts) < 2 || len(parts) > 3 {
		return Spec{}, fmt.Errorf("routing %q: want synthetic:diverse, synthetic:agent or synthetic:uniform, optionally followed by :seed=N", s)
	}
	r, err := ParseRegime(parts[1])
	if err != nil {
		return Spec{}, fmt.Errorf("routing %q: %w", s, err)
	}
	spec := Spec{Regime: r, Seed: 1}
	if len(parts) == 3 {
		v, ok := strings.CutPrefix(parts[2], "seed=")
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			return Spec{}, fmt.Errorf("routing %q: %q is not seed=N with N a non-negative integer", s, parts[2])
		}
		spec.Seed = n
	}
	return spec, nil
}

// Generate draws tokens positions of routing for geom in regime; the same
// arguments give the same trace on every machine (integer arithmetic and a
// PCG stream only).
func Generate(geom Geometry, regime Regime, tokens int, seed uint64) (*Trace, error) {
	if err := geom.Validate(); err != nil {
		return nil, err
	}
	if tokens < 1 || tokens > MaxTraceIDs/(geom.Layers*geom.TopK) {
		return nil, fmt.Errorf("routing: %d tokens is out of range 1 to %d for %s", tokens, MaxTraceIDs/(geom.Layers*geom.TopK), geom)
	}
	g, err := newGenerator(geom, regime, seed)
	if err != nil {
		return nil, err
	}
	t, _ := NewTrace(geom, 0)
	t.ids = make([]int32, 0, tokens*geom.Layers*geom.TopK)
	for range tokens {
		g.next(t)
	}
	return t, nil
}

// params are a regime's knobs, probabilities in 1/65536ths.
type params struct {
	p1     uint64 // a pick repeats one of the previous token's experts
	pWin   uint64 // else it repeats one from the tokens before that, up to window back
	window int    // tokens of history the second rule looks at (counting the previous one)
	skew   int    // popularity weight of rank r is 1/(r+offset), offset = experts*16/skew
}

// regimeParams are tuned so that a per-layer LRU replay of 512 tokens
// lands on the published points (docs/routing.md, TestCalibration).
// Diverse text is less local with more experts, as every source reports:
// the 128-expert values hold up to 128 experts, the 256-expert values
// from 256 on (they also give Qwen3.8-Flash-Next's ~67% at 64 slots), and
// in between the two are interpolated in integers.
func regimeParams(geom Geometry, r Regime) params {
	switch r {
	case Diverse:
		lo := params{p1: prob(0.45), pWin: prob(0.35), window: 8, skew: 320}
		hi := params{p1: prob(0.30), pWin: prob(0.25), window: 8, skew: 320}
		e := uint64(min(max(geom.Experts, 128), 256) - 128) // 0 to 128
		lo.p1 = (lo.p1*(128-e) + hi.p1*e) / 128
		lo.pWin = (lo.pWin*(128-e) + hi.pWin*e) / 128
		return lo
	case Agent:
		return params{p1: prob(0.60), pWin: prob(0.25), window: 8, skew: 320}
	}
	return params{}
}

// prob converts a constant probability to 1/65536ths. The explicit
// float64 conversion rounds the product, so no platform fuses it into a
// multiply-add with a different last bit: the result is the same everywhere.
func prob(p float64) uint64 { return uint64(float64(p*65536) + 0.5) }

type layerState struct {
	perm    []int32   // popularity rank -> expert
	history [][]int32 // ring of the last window tokens' picks
}

type generator struct {
	geom   Geometry
	p      params
	rng    *rand.Rand
	cum    []uint64 // cumulative popularity weights by rank
	layers []layerState
	tok    int
	mark   []int // token+1 that last picked an expert in the current layer
	cand   []int32
	row    []int32
}

func newGenerator(geom Geometry, regime Regime, seed uint64) (*generator, error) {
	if err := geom.Validate(); err != nil {
		return nil, err
	}
	if _, err := ParseRegime(string(regime)); err != nil {
		return nil, err
	}
	return newGeneratorParams(geom, regimeParams(geom, regime), seed), nil
}

func newGeneratorParams(geom Geometry, p params, seed uint64) *generator {
	g := &generator{
		geom: geom, p: p,
		rng:  rand.New(rand.NewPCG(seed, 0x6e766d6169726f75)), // "nvmairou"
		mark: make([]int, geom.Experts),
		row:  make([]int32, 0, geom.Layers*geom.TopK),
	}
	g.cum = make([]uint64, geom.Experts)
	var total uint64
	for r := range geom.Experts {
		w := uint64(1 << 32) // uniform
		if p.skew > 0 {
			offset := uint64(max(1, geom.Experts*16/p.skew))
			w = (1 << 40) / (uint64(r) + offset)
		}
		total += w
		g.cum[r] = total
	}
	g.layers = make([]layerState, geom.Layers)
	for l := range g.layers {
		perm := make([]int32, geom.Experts)
		for i := range perm {
			perm[i] = int32(i)
		}
		for i := len(perm) - 1; i > 0; i-- {
			j := g.rng.IntN(i + 1)
			perm[i], perm[j] = perm[j], perm[i]
		}
		g.layers[l] = layerState{perm: perm}
	}
	return g
}

// next appends one token's picks for every layer to t.
func (g *generator) next(t *Trace) {
	g.row = g.row[:0]
	for l := range g.layers {
		g.row = g.pickLayer(&g.layers[l], g.row)
	}
	t.appendToken(g.row)
	g.tok++
}

func (g *generator) pickLayer(ls *layerState, row []int32) []int32 {
	k := g.geom.TopK
	stamp := g.tok*g.geom.Layers + len(row)/k + 1 // unique per (token, layer)
	start := len(row)
	for range k {
		e := int32(-1)
		u := g.rng.Uint64N(65536)
		if u < g.p.p1 && len(ls.history) > 0 {
			e = g.fromHistory(ls, 0, 1, stamp)
		} else if u < g.p.p1+g.p.pWin && len(ls.history) > 1 {
			e = g.fromHistory(ls, 1, g.p.window, stamp)
		}
		if e < 0 {
			e = g.popular(ls, stamp)
		}
		g.mark[e] = stamp
		row = append(row, e)
	}
	picks := append([]int32(nil), row[start:]...)
	if len(ls.history) < max(g.p.window, 1) {
		ls.history = append(ls.history, nil)
	}
	copy(ls.history[1:], ls.history[:len(ls.history)-1])
	ls.history[0] = picks
	return row
}

// fromHistory picks uniformly among the experts of history[from:to] not yet
// picked for this token, counting each expert once; -1 when there are none.
func (g *generator) fromHistory(ls *layerState, from, to int, stamp int) int32 {
	g.cand = g.cand[:0]
	for _, set := range ls.history[from:min(to, len(ls.history))] {
		for _, e := range set {
			if g.mark[e] != stamp && g.mark[e] != -stamp {
				g.mark[e] = -stamp
				g.cand = append(g.cand, e)
			}
		}
	}
	for _, e := range g.cand {
		g.mark[e] = 0
	}
	if len(g.cand) == 0 {
		return -1
	}
	return g.cand[g.rng.IntN(len(g.cand))]
}

// popular draws by popularity among experts not yet picked for this token.
func (g *generator) popular(ls *layerState, stamp int) int32 {
	total := g.cum[len(g.cum)-1]
	for range 64 {
		u := g.rng.Uint64N(total)
		lo, hi := 0, len(g.cum)-1
		for lo < hi {
			mid := (lo + hi) / 2
			if g.cum[mid] > u {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		if e := ls.perm[lo]; g.mark[e] != stamp {
			return e
		}
	}
	// Nearly every expert is taken (top-k close to the expert count): the
	// most popular free one.
	for _, e := range ls.perm {
		if g.mark[e] != stamp {
			return e
		}
	}
	panic("routing: no free expert; top-k exceeds the expert count")
}
