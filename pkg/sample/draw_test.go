package sample

import (
	"cmp"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// bigExp is e**x to 256 bits: (Taylor series of e**(x/2**12))**(2**12).
func bigExp(x float64) *big.Float {
	const prec = 256
	y := new(big.Float).SetPrec(prec).SetMantExp(big.NewFloat(x).SetPrec(prec), -12)
	sum, term := new(big.Float).SetPrec(prec).SetInt64(1), new(big.Float).SetPrec(prec).SetInt64(1)
	for n := int64(1); n < 60; n++ {
		term.Mul(term, y)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(n))
		sum.Add(sum, term)
	}
	for range 12 {
		sum.Mul(sum, sum)
	}
	return sum
}

// Exp is within 1 ulp of e**x (worked out to 256 bits) over its range,
// subnormal results included, and exact where e**x is.
func TestExpIsWithinOneULP(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	xs := []float64{1e-300, -1e-300, 1e-9, -1e-9, 0.5, -0.5, 1, -1, 20, -20,
		-87.3, -700, -708.3, -708.4, -709, -720, -740, -745, -745.13, 700}
	for range 3000 {
		xs = append(xs, rng.Float64()*-30, rng.Float64()*-745, rng.Float64()*700, rng.NormFloat64())
	}
	for _, x := range xs {
		got := Exp(x)
		want := bigExp(x)
		diff := new(big.Float).Sub(new(big.Float).SetFloat64(got), want)
		diff.Abs(diff)
		ulp := math.Nextafter(got, math.Inf(1)) - got
		if ulp == 0 || diff.Cmp(big.NewFloat(ulp)) >= 0 {
			t.Fatalf("Exp(%v) = %v, e**x %s: 1 ulp or more apart", x, got, want.Text('g', 20))
		}
	}
	cases := []struct{ x, want float64 }{
		{0, 1}, {math.Inf(-1), 0}, {-746, 0}, {710, math.Inf(1)}, {math.Inf(1), math.Inf(1)},
	}
	for _, c := range cases {
		if got := Exp(c.x); got != c.want {
			t.Errorf("Exp(%v) = %v, want %v", c.x, got, c.want)
		}
	}
	if !math.IsNaN(Exp(math.NaN())) {
		t.Error("Exp(NaN) is not NaN")
	}
}

// The bits of Exp at a few points (taken from amd64, where the test above
// holds them within 1 ulp of e**x), so that a platform that fused or
// reordered an operation (arm64's multiply-adds, say) fails here rather
// than sampling other tokens than amd64 and the GPU.
func TestExpIsTheSameEverywhere(t *testing.T) {
	pinned := []struct {
		x    float64
		bits uint64
	}{
		{-0.1, 0x3fecf46d99d52b3a}, {-1.5, 0x3fcc8f87724b5c1d}, {-10.25, 0x3f02899a7a835446},
		{-123.456, 0x34cda9fb9e4ee720}, {-700.5, 0x00c4ff475c68ca02}, {-744, 0x0000000000000002},
	}
	for _, p := range pinned {
		if got := math.Float64bits(Exp(p.x)); got != p.bits {
			t.Errorf("Exp(%v) bits %#016x, want %#016x", p.x, got, p.bits)
		}
	}
}

// rowFinish is Finish as the GPU engine computes it (kernels.cu's samp_*):
// over the whole row, removed tokens weighing 0, sums in blocks of Block
// ids, and top-p's cut found over every token of the row (removed ones
// with mass 0), by value groups as a radix select finds it.
func rowFinish(st Step, row []float32) int {
	V := len(row)
	thr := float32(math.Inf(-1))
	if st.TopK > 0 && st.TopK < V {
		thr = TopKThreshold(row, st.TopK)
	}
	m := math.Inf(-1)
	for _, l := range row {
		m = max(m, float64(l)/st.Temperature)
	}
	c, w := make([]float64, V), make([]float64, V)
	for i, l := range row {
		c[i] = float64(l) / st.Temperature
		if l >= thr && !math.IsInf(float64(l), -1) {
			w[i] = Exp(c[i] - m)
		}
	}
	cut := math.Inf(-1)
	if st.TopP > 0 {
		var total int64
		for _, x := range w {
			total += mass(x)
		}
		limit := int64(float64(total) * st.TopP)
		// mass[v]: the mass of the tokens whose c is v; values descending.
		byValue := map[float64]int64{}
		for i := range c {
			byValue[c[i]] += mass(w[i])
		}
		values := make([]float64, 0, len(byValue))
		for v := range byValue {
			values = append(values, v)
		}
		slices.SortFunc(values, func(a, b float64) int { return cmp.Compare(b, a) })
		var above int64
		cut = values[0]
		for _, v := range values {
			if above >= limit {
				break
			}
			cut, above = v, above+byValue[v]
		}
	}
	minThr := m + st.LogMinP
	for i := range w {
		if c[i] < cut || c[i] < minThr {
			w[i] = 0
		}
	}
	return rowDraw(w, st.U)
}

// rowDraw is draw over w (index order, blocks of Block), zeros included.
func rowDraw(w []float64, u float64) int {
	var total float64
	for b := 0; b < len(w); b += Block {
		var part float64
		for _, x := range w[b:min(b+Block, len(w))] {
			part += x
		}
		total += part
	}
	t := u * total
	var done float64
	last := 0
	for b := 0; b < len(w); b += Block {
		blk := w[b:min(b+Block, len(w))]
		var part float64
		for _, x := range blk {
			part += x
		}
		if t < done+part {
			run, lastIn := done, 0
			for i, x := range blk {
				if x > 0 {
					lastIn = i
				}
				run += x
				if t < run {
					return b + i
				}
			}
			return b + lastIn
		}
		done += part
		for i, x := range blk {
			if x > 0 {
				last = b + i
			}
		}
	}
	return last
}

// The sampler's blocked sums over only its candidates are the device's sums
// over the whole row, and its top-p cut over the candidates is the one
// found over the whole row: Finish equals rowFinish on random rows (ties,
// −Inf, ±0, rows of few finite values, vocabularies of several blocks,
// peaked and flat).
func TestFinishIsTheDeviceComputation(t *testing.T) {
	params := []Params{
		{Temperature: 0.7, TopK: 20, TopP: 0.95},
		{Temperature: 1, TopK: 1},
		{Temperature: 1.3, TopK: 50},
		{Temperature: 0.5, TopK: 8, TopP: 0.5},
		{Temperature: 0.9, TopK: 40, TopP: 0.9, MinP: 0.05},
		{Temperature: 2, TopK: 1500, TopP: 0.99},
		{Temperature: 0.7, TopP: 0.95},
		{Temperature: 1},
		{Temperature: 1.1, MinP: 0.1},
		{Temperature: 3, TopP: 0.8, MinP: 0.02},
		{Temperature: 0.6, TopP: 1e-12},
	}
	negInf := float32(math.Inf(-1))
	for pi, p := range params {
		rng := rand.New(rand.NewPCG(uint64(pi), 9))
		p.Seed = uint64(pi)
		s, _ := New(p)
		for step := range 150 {
			V := []int{300, 1600, 4160}[step%3]
			scale := []float64{0.3, 3, 20}[step%5%3]
			row := make([]float32, V)
			for i := range row {
				switch r := rng.IntN(20); {
				case r == 0:
					row[i] = negInf
				case r < 5:
					row[i] = float32(rng.IntN(4)) // many ties
				case r == 5:
					row[i] = float32(math.Copysign(0, -1))
				default:
					row[i] = float32(rng.NormFloat64() * scale)
				}
			}
			if step%17 == 0 { // mostly −Inf: fewer finite values than k
				for i := range row[:V-3] {
					row[i] = negInf
				}
			}
			st := s.Next()
			want, err := s.Finish(st, row)
			if err != nil {
				t.Fatal(err)
			}
			if got := rowFinish(st, row); got != want {
				t.Fatalf("params %d step %d: the row computation picks %d, Finish %d", pi, step, got, want)
			}
		}
	}
}

// Next draws one number per sampled step and none when greedy; Sample is
// Next, Finish and Accept.
func TestStepsAreSample(t *testing.T) {
	p := Params{Temperature: 0.8, TopK: 5, TopP: 0.9, RepetitionPenalty: 1.2, Seed: 3}
	a, _ := New(p)
	b, _ := New(p)
	row := []float32{1, 2, 3, 2.5, 0.5, -1, 2.9}
	for range 50 {
		want, err := a.Sample(row)
		if err != nil {
			t.Fatal(err)
		}
		st := b.Next()
		got, err := b.Finish(st, row)
		if err != nil || got != want {
			t.Fatalf("Finish(Next()) = %d, %v; Sample %d", got, err, want)
		}
		b.Accept(got)
	}
	if !slices.Equal(a.History(), b.History()) || len(a.History()) != 50 {
		t.Fatalf("histories %v / %v", a.History(), b.History())
	}
	g, _ := New(Params{MinP: 0.5})
	if st := g.Next(); st.U != 0 || st.LogMinP != math.Log(0.5) {
		t.Fatalf("greedy step %+v", st)
	}
}
