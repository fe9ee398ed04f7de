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
// ids, and top-p from only the M most probable tokens (ok false: the
// device would hand the row to the host).
func rowFinish(st Step, row []float32, M int) (id int, ok bool) {
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
	minThr := m + st.LogMinP
	if st.TopP == 0 {
		for i := range w {
			if c[i] < minThr {
				w[i] = 0
			}
		}
		return rowDraw(w, st.U), true
	}
	var total float64
	for b := 0; b < V; b += Block {
		var part float64
		for _, x := range w[b:min(b+Block, V)] {
			part += x
		}
		total += part
	}
	var top []int // the M most probable (ties with the M-th included), sorted
	for i := range row {
		if w[i] > 0 || (row[i] >= thr && !math.IsInf(float64(row[i]), -1)) {
			top = append(top, i)
		}
	}
	complete := len(top) <= M
	slices.SortFunc(top, func(a, b int) int {
		if r := cmp.Compare(c[b], c[a]); r != 0 {
			return r
		}
		return cmp.Compare(a, b)
	})
	if !complete {
		cut := TopKThreshold(row, M)
		n := 0
		for _, i := range top {
			if row[i] >= cut {
				n++
			}
		}
		top = top[:n] // the device lists these and no more
	}
	var above float64
	keep := 0
	for j, i := range top {
		if j > 0 && above >= st.TopP {
			break
		}
		keep = j + 1
		above += w[i] / total
	}
	if !complete && (keep == len(top) || c[top[keep-1]] == c[top[len(top)-1]]) {
		return 0, false // the kept prefix may reach tokens past the list
	}
	var kw []float64
	var kid []int
	for _, i := range top[:keep] {
		if c[i] >= minThr {
			kw, kid = append(kw, w[i]), append(kid, i)
		}
	}
	return kid[rowDraw(kw, st.U)], true
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
// over the whole row, and top-p read from the most probable few is top-p
// over all: Finish equals rowFinish on random rows (ties, −Inf, ±0, rows of
// few finite values, vocabularies of several blocks) whenever the device
// could decide, and the device decides the usual cases.
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
	}
	negInf := float32(math.Inf(-1))
	for pi, p := range params {
		rng := rand.New(rand.NewPCG(uint64(pi), 9))
		p.Seed = uint64(pi)
		s, _ := New(p)
		decided := 0
		for step := range 150 {
			V := []int{300, 1600, 4160}[step%3]
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
					row[i] = float32(rng.NormFloat64() * 3)
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
			got, ok := rowFinish(st, row, 1024)
			if ok {
				decided++
				if got != want {
					t.Fatalf("params %d step %d: the row computation picks %d, Finish %d", pi, step, got, want)
				}
			}
		}
		t.Logf("params %+v: the device decides %d of 150 steps", p, decided)
		// Flat distributions whose nucleus is longer than 1,024 tokens go
		// to the host; the usual settings never do.
		if flat := p.Temperature >= 2; !flat && decided != 150 {
			t.Errorf("params %+v: the device would decide only %d of 150 steps", p, decided)
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
