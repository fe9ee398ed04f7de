package gpukernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/kernels"
	nvblocks "github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/quant"
)

var (
	devOnce sync.Once
	dev     *cuda.Device
	set     *Set
	devErr  error
)

// device opens the GPU once for the package's tests, or skips with the reason.
func device(t *testing.T) (*cuda.Device, *Set) {
	t.Helper()
	devOnce.Do(func() {
		if dev, devErr = cuda.Open(0); devErr != nil {
			return
		}
		devErr = dev.Do(func(c *cuda.Ctx) (err error) { set, err = Load(c); return })
	})
	cudatest.Unusable(t, devErr)
	return dev, set
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

func randMatrix(t *testing.T, r *rand.Rand, rows, cols int, enc kernels.Encoding) *kernels.Matrix {
	w := randVec(r, rows*cols, 0.05)
	m := &kernels.Matrix{Rows: rows, Cols: cols, Enc: enc}
	switch enc {
	case kernels.Q4, kernels.Q8:
		bits := 4
		if enc == kernels.Q8 {
			bits = 8
		}
		var err error
		if m.Data, m.Scales, m.Biases, err = quant.Quantize(rows, cols, w, bits); err != nil {
			t.Fatal(err)
		}
	case kernels.BF16:
		m.Data = make([]byte, 2*len(w))
		quant.NarrowBF16(m.Data, w)
	case kernels.F16:
		m.Data = make([]byte, 2*len(w))
		for i, v := range w {
			h := quant.F32ToF16(v)
			m.Data[2*i], m.Data[2*i+1] = byte(h), byte(h>>8)
		}
	case kernels.F32:
		m.Data = slices.Clone(cuda.Bytes(w))
	}
	return m
}

// gpuBuf allocates device memory for tests and frees it at cleanup.
type gpuBuf struct {
	c    *cuda.Ctx
	ptrs []cuda.DevicePtr
}

func (b *gpuBuf) up(src []byte) cuda.DevicePtr {
	if len(src) == 0 {
		return 0
	}
	p, err := b.c.AllocCopy(src)
	if err != nil {
		panic(err)
	}
	b.ptrs = append(b.ptrs, p)
	return p
}

func (b *gpuBuf) poisoned(n int) cuda.DevicePtr {
	p, err := b.c.Alloc(uint64(n))
	if err != nil {
		panic(err)
	}
	b.c.Memset32(p, 0x7fc00001, uint64((n+3)/4)) // a NaN: unwritten outputs show
	b.ptrs = append(b.ptrs, p)
	return p
}

func (b *gpuBuf) f32(p cuda.DevicePtr, n int) []float32 {
	out := make([]float32, n)
	if err := b.c.DtoH(cuda.Bytes(out), p); err != nil {
		panic(err)
	}
	return out
}

func (b *gpuBuf) free() {
	for _, p := range b.ptrs {
		b.c.Free(p)
	}
}

func upMat(b *gpuBuf, m *kernels.Matrix) *Mat {
	return &Mat{Rows: m.Rows, Cols: m.Cols, Enc: m.Enc, Data: b.up(m.Data), Scales: b.up(m.Scales), Biases: b.up(m.Biases)}
}

func quantized(b *gpuBuf, l *Launcher, x cuda.DevicePtr, vectors, cols int) *QAct {
	q8, q4, ds := QActBytes(vectors, cols)
	q := &QAct{Q8: b.poisoned(int(q8)), Q4: b.poisoned(int(q4)), DX: b.poisoned(int(ds)), SX: b.poisoned(int(ds))}
	if err := l.Quantize(q, x, vectors, cols); err != nil {
		panic(err)
	}
	return q
}

func withGPU(t *testing.T, fn func(b *gpuBuf, l *Launcher)) {
	d, s := device(t)
	err := d.Do(func(c *cuda.Ctx) error {
		b := &gpuBuf{c: c}
		defer b.free()
		fn(b, &Launcher{C: c, K: s})
		return c.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Q4/Q8 GEMV is bitwise kernels.MatVecFast (the int8-activation path) at
// every tail of rows and groups, with and without a residual.
func TestQGEMVBitwiseMatVecFast(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
		for _, shape := range [][2]int{{1, 64}, {17, 128}, {33, 1088}, {300, 2048}, {5, 64 * 17}} {
			rows, cols := shape[0], shape[1]
			m := randMatrix(t, r, rows, cols, enc)
			x := randVec(r, cols, 1)
			res := randVec(r, rows, 1)
			want := make([]float32, rows)
			kernels.MatVecFast(want, m, x)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				dm := upMat(b, m)
				dx := b.up(cuda.Bytes(x))
				q := quantized(b, l, dx, 1, cols)
				y := b.poisoned(4 * rows)
				if err := l.GEMV(y, dm, dx, q, 0, 0, 1, false, 1); err != nil {
					t.Fatal(err)
				}
				yr := b.poisoned(4 * rows)
				if err := l.GEMV(yr, dm, dx, q, b.up(cuda.Bytes(res)), 0, 1, false, 1); err != nil {
					t.Fatal(err)
				}
				got, gotR := b.f32(y, rows), b.f32(yr, rows)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("enc %d %dx%d row %d: GPU %v, MatVecFast %v", enc, rows, cols, i, got[i], want[i])
					}
					if w := res[i] + want[i]; math.Float32bits(gotR[i]) != math.Float32bits(w) {
						t.Fatalf("enc %d %dx%d row %d with residual: GPU %v, want %v", enc, rows, cols, i, gotR[i], w)
					}
				}
			})
		}
	}
}

// Several tokens through one read of the weights (prefill) give each
// token's MatVecFast bitwise.
func TestQGEMVTokenBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const rows, cols, T = 37, 1088, 11
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8} {
		m := randMatrix(t, r, rows, cols, enc)
		x := randVec(r, T*cols, 1)
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			dx := b.up(cuda.Bytes(x))
			q := quantized(b, l, dx, T, cols)
			y := b.poisoned(4 * T * rows)
			if err := l.GEMV(y, upMat(b, m), dx, q, 0, 0, 1, false, T); err != nil {
				t.Fatal(err)
			}
			got := b.f32(y, T*rows)
			for tok := range T {
				want := make([]float32, rows)
				kernels.MatVecFast(want, m, x[tok*cols:(tok+1)*cols])
				if err := compare(got[tok*rows:(tok+1)*rows], want, enc); err != "" {
					t.Fatalf("enc %d token %d: %s", enc, tok, err)
				}
			}
		})
	}
}

// Gathered GEMV (experts picked on the device, per-slot inputs) is bitwise
// MatVecFast of each picked expert.
func TestQGEMVGatheredExperts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const E, k, rows, cols, T = 6, 3, 40, 256, 2
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8, kernels.BF16} {
		experts := make([]*kernels.Matrix, E)
		var data, scales, biases []byte
		for e := range experts {
			experts[e] = randMatrix(t, r, rows, cols, enc)
			data = append(data, experts[e].Data...)
			scales = append(scales, experts[e].Scales...)
			biases = append(biases, experts[e].Biases...)
		}
		sel := []int32{4, 0, 2, 1, 5, 3}
		xs := randVec(r, T*k*cols, 1)
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			dm := &Mat{Rows: rows, Cols: cols, Enc: enc, Data: b.up(data), Scales: b.up(scales), Biases: b.up(biases),
				EData: int64(len(experts[0].Data)), EScale: int64(len(experts[0].Scales))}
			dx := b.up(cuda.Bytes(xs))
			var q *QAct
			if dm.Quantized() {
				q = quantized(b, l, dx, T*k, cols)
			}
			y := b.poisoned(4 * T * k * rows)
			if err := l.GEMV(y, dm, dx, q, 0, b.up(cuda.Bytes(sel)), k, true, T); err != nil {
				t.Fatal(err)
			}
			got := b.f32(y, T*k*rows)
			for slot := range T * k {
				want := make([]float32, rows)
				kernels.MatVecFast(want, experts[sel[slot]], xs[slot*cols:(slot+1)*cols])
				g := got[slot*rows : (slot+1)*rows]
				if err := compare(g, want, enc); err != "" {
					t.Fatalf("enc %d slot %d: %s", enc, slot, err)
				}
			}
		})
	}
}

// compare is bitwise for the GEMV encodings (every GEMV follows the CPU's
// summation order), else (F32 standing for "a float reduction in another
// order") a relative tolerance of 1e-5.
func compare(got, want []float32, enc kernels.Encoding) string {
	var num, den float64
	for i := range want {
		if got[i] != got[i] {
			return "NaN (unwritten?) at " + itoa(i)
		}
		if enc != kernels.F32 {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				return "differs at " + itoa(i)
			}
		}
		d := float64(got[i] - want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if rel := math.Sqrt(num / max(den, 1e-30)); rel > 1e-5 {
		return "relative error " + ftoa(rel)
	}
	return ""
}

func itoa(i int) string     { return ftoa(float64(i)) }
func ftoa(f float64) string { return fmtG(f) }

// Float GEMV (BF16, F16, F32) is bitwise kernels.MatVec (its 8-lane order).
func TestFGEMVBitwiseMatVec(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, enc := range []kernels.Encoding{kernels.BF16, kernels.F16, kernels.F32} {
		for _, shape := range [][2]int{{1, 8}, {9, 100}, {70, 2048}, {3, 4104}, {33, 13}} {
			rows, cols := shape[0], shape[1]
			m := randMatrix(t, r, rows, cols, enc)
			x := randVec(r, cols, 1)
			want := make([]float32, rows)
			kernels.MatVec(want, m, x)
			withGPU(t, func(b *gpuBuf, l *Launcher) {
				y := b.poisoned(4 * rows)
				if err := l.GEMV(y, upMat(b, m), b.up(cuda.Bytes(x)), nil, 0, 0, 1, false, 1); err != nil {
					t.Fatal(err)
				}
				if err := compare(b.f32(y, rows), want, kernels.BF16); err != "" {
					t.Fatalf("enc %d %dx%d: %s", enc, rows, cols, err)
				}
			})
		}
	}
}

// The embedding lookup is bitwise Matrix.Row.
func TestEmbedBitwiseRow(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, enc := range []kernels.Encoding{kernels.Q4, kernels.Q8, kernels.BF16} {
		m := randMatrix(t, r, 50, 192, enc)
		tokens := []int32{49, 0, 17}
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			out := b.poisoned(4 * 3 * 192)
			if err := l.Embed(out, upMat(b, m), b.up(cuda.Bytes(tokens)), 3); err != nil {
				t.Fatal(err)
			}
			got := b.f32(out, 3*192)
			for i, tok := range tokens {
				want := make([]float32, 192)
				m.Row(want, int(tok))
				if !slices.Equal(cuda.Bytes(got[i*192:(i+1)*192]), cuda.Bytes(want)) {
					t.Fatalf("enc %d token %d: rows differ", enc, tok)
				}
			}
		})
	}
}

// SwiGLU is bitwise kernels.SwiGLU (the same float32 exp polynomial).
func TestSwiGLUBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	g, u := randVec(r, 1000, 4), randVec(r, 1000, 1)
	g[0], g[1] = 100, -100
	want := slices.Clone(g)
	kernels.SwiGLU(want, u)
	withGPU(t, func(b *gpuBuf, l *Launcher) {
		dg := b.up(cuda.Bytes(g))
		if err := l.SwiGLU(dg, b.up(cuda.Bytes(u)), len(g)); err != nil {
			t.Fatal(err)
		}
		if got := b.f32(dg, len(g)); !slices.Equal(cuda.Bytes(got), cuda.Bytes(want)) {
			t.Fatal("SwiGLU differs from kernels.SwiGLU")
		}
	})
}

// RMSNorm agrees with qwen35's rmsNorm (float64 sum of squares; the GPU
// adds in a tree, so the float32 result may differ by an ulp).
func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const rows, n = 3, 2048
	x, scale := randVec(r, rows*n, 2), randVec(r, n, 1)
	want := make([]float32, rows*n)
	for row := range rows {
		xr := x[row*n : (row+1)*n]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(float64(float32(ss/n)+1e-6)))
		for i, v := range xr {
			want[row*n+i] = v * inv * scale[i]
		}
	}
	withGPU(t, func(b *gpuBuf, l *Launcher) {
		out := b.poisoned(4 * rows * n)
		if err := l.RMSNorm(out, b.up(cuda.Bytes(x)), b.up(cuda.Bytes(scale)), n, rows, 1e-6); err != nil {
			t.Fatal(err)
		}
		if err := compare(b.f32(out, rows*n), want, kernels.F32); err != "" {
			t.Fatal(err)
		}
	})
}

// Argmax takes the lowest index among equal maxima, like sample.Greedy.
func TestArgmaxLowestOnTies(t *testing.T) {
	ref := func(v []float32) int32 {
		best := 0
		for i, x := range v {
			if x != x {
				return -1
			}
			if x > v[best] {
				best = i
			}
		}
		return int32(best)
	}
	inf := float32(math.Inf(1))
	r := rand.New(rand.NewPCG(13, 14))
	for _, c := range []struct {
		name string
		V    int
		skew bool // the row starts 4 bytes past a 16-byte boundary: the scalar scan
		prep func(v []float32)
	}{
		{"release vocabulary, ties", 248320, false, func(v []float32) { v[1000], v[200000], v[5] = 50, 50, 49 }},
		{"tie inside one float4 and across threads", 248320, false, func(v []float32) { v[4097], v[4098], v[9] = 60, 60, 60 }},
		{"max in the tail", 248323, false, func(v []float32) { v[248322], v[248321] = 70, 70 }},
		{"tie between a float4 and the tail", 248322, false, func(v []float32) { v[248321], v[17] = 70, 70 }},
		{"unaligned row", 248320, true, func(v []float32) { v[3], v[7] = 80, 80 }},
		{"all -Inf", 5003, false, func(v []float32) {
			for i := range v {
				v[i] = -inf
			}
		}},
		{"NaN", 248320, false, func(v []float32) { v[123457] = float32(math.NaN()) }},
		{"NaN in the tail", 1027, false, func(v []float32) { v[1026] = float32(math.NaN()) }},
		{"tiny", 3, false, func(v []float32) { v[1], v[2] = 2, 2 }},
	} {
		v := randVec(r, c.V, 3)
		c.prep(v)
		want := ref(v)
		withGPU(t, func(b *gpuBuf, l *Launcher) {
			out := b.poisoned(4)
			row := b.up(cuda.Bytes(append([]float32{0}, v...))) + 4
			if !c.skew {
				row = b.up(cuda.Bytes(v))
			}
			if err := l.Argmax(out, row, len(v)); err != nil {
				t.Fatal(err)
			}
			var got [1]int32
			b.c.DtoH(cuda.Bytes(got[:]), out)
			if got[0] != want {
				t.Errorf("%s: argmax %d, want %d", c.name, got[0], want)
			}
		})
	}
}

// Route picks qwen35's experts (top-k, lower id on ties, ascending) with the
// same renormalised weights.
func TestRoute(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	const E, k, T = 256, 8, 3
	logits := randVec(r, T*E, 2)
	logits[5], logits[9] = 9, 9 // a tie
	withGPU(t, func(b *gpuBuf, l *Launcher) {
		sel, w := b.poisoned(4*T*k), b.poisoned(4*T*k)
		if err := l.Route(sel, w, b.up(cuda.Bytes(logits)), E, k, T, E); err != nil {
			t.Fatal(err)
		}
		gotSel := make([]int32, T*k)
		b.c.DtoH(cuda.Bytes(gotSel), sel)
		gotW := b.f32(w, T*k)
		for tok := range T {
			wantSel, wantW := routeRef(logits[tok*E:(tok+1)*E], k)
			for s := range k {
				if int(gotSel[tok*k+s]) != wantSel[s] {
					t.Fatalf("token %d: experts %v, want %v", tok, gotSel[tok*k:(tok+1)*k], wantSel)
				}
				if d := math.Abs(float64(gotW[tok*k+s] - wantW[s])); d > 1e-7 {
					t.Fatalf("token %d slot %d: weight %v, want %v", tok, s, gotW[tok*k+s], wantW[s])
				}
			}
		}
	})
}

// RouteFixed keeps the experts it is given (a replayed routing) and
// weighs them as the CPU engine's blocks.RouteFixed does: the router's
// softmax at those ids, renormalised over them.
func TestRouteFixed(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	const E, k, T = 256, 8, 3
	logits := randVec(r, T*E, 2)
	fixed := make([]int32, T*k)
	for tok := range T {
		ids := r.Perm(E)[:k]
		slices.Sort(ids)
		for s, e := range ids {
			fixed[tok*k+s] = int32(e)
		}
	}
	withGPU(t, func(b *gpuBuf, l *Launcher) {
		sel, w := b.poisoned(4*T*k), b.poisoned(4*T*k)
		if err := l.RouteFixed(sel, w, b.up(cuda.Bytes(logits)), b.up(cuda.Bytes(fixed)), E, k, T, E); err != nil {
			t.Fatal(err)
		}
		gotSel := make([]int32, T*k)
		b.c.DtoH(cuda.Bytes(gotSel), sel)
		gotW := b.f32(w, T*k)
		probs := make([]float32, E)
		for tok := range T {
			wantSel := make([]int, k)
			for s := range k {
				wantSel[s] = int(fixed[tok*k+s])
			}
			wantW := make([]float32, k)
			nvblocks.RouteFixed(logits[tok*E:(tok+1)*E], probs, wantSel, wantW)
			for s := range k {
				if int(gotSel[tok*k+s]) != wantSel[s] {
					t.Fatalf("token %d: experts %v, want %v", tok, gotSel[tok*k:(tok+1)*k], wantSel)
				}
				if d := math.Abs(float64(gotW[tok*k+s] - wantW[s])); d > 1e-7 {
					t.Fatalf("token %d slot %d: weight %v, want %v", tok, s, gotW[tok*k+s], wantW[s])
				}
			}
		}
	})
}

// routeRef is qwen35's route.
func routeRef(logits []float32, k int) ([]int, []float32) {
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = max(maxL, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxL)
	}
	probs := make([]float32, len(logits))
	for e, l := range logits {
		probs[e] = float32(math.Exp(float64(l)-maxL) / sum)
	}
	var sel []int
	for range k {
		best := -1
		for e, p := range probs {
			if (best < 0 || p > probs[best]) && !slices.Contains(sel, e) {
				best = e
			}
		}
		sel = append(sel, best)
	}
	slices.Sort(sel)
	var total float32
	for _, e := range sel {
		total += probs[e]
	}
	w := make([]float32, k)
	for s, e := range sel {
		w[s] = probs[e] / total
	}
	return sel, w
}
