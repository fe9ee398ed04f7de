package qwen38gpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
)

// Each kernel of kernels.cu against its pure-Go reference (the CPU
// engine's functions where they are exported, else the same loops):
// exact where the Go code's order is kept, else within the stated bound.

var (
	devOnce sync.Once
	tdev    *cuda.Device
	tks     *gpukernels.Set
	tqk     *Kernels
	devErr  error
)

func device(t *testing.T) *cuda.Device {
	t.Helper()
	devOnce.Do(func() {
		if tdev, devErr = cuda.Open(0); devErr != nil {
			return
		}
		devErr = tdev.Do(func(c *cuda.Ctx) (err error) {
			if tks, err = gpukernels.Load(c); err != nil {
				return err
			}
			tqk, err = LoadKernels(c)
			return err
		})
	})
	cudatest.Unusable(t, devErr)
	return tdev
}

// bufs is a test's device memory, freed at the end of its run.
type bufs struct {
	t    *testing.T
	c    *cuda.Ctx
	ptrs []cuda.DevicePtr
}

func (b *bufs) up(v []float32) cuda.DevicePtr { return b.upBytes(cuda.Bytes(v)) }

func (b *bufs) upBytes(v []byte) cuda.DevicePtr {
	p, err := b.c.AllocCopy(v)
	if err != nil {
		b.t.Fatal(err)
	}
	b.ptrs = append(b.ptrs, p)
	return p
}

func (b *bufs) zeros(n int) cuda.DevicePtr { return b.up(make([]float32, n)) }

func (b *bufs) down(p cuda.DevicePtr, n int) []float32 {
	if err := b.c.Sync(); err != nil {
		b.t.Fatal(err)
	}
	v := make([]float32, n)
	if err := b.c.DtoH(cuda.Bytes(v), p); err != nil {
		b.t.Fatal(err)
	}
	return v
}

func (b *bufs) downBytes(p cuda.DevicePtr, n int) []byte {
	if err := b.c.Sync(); err != nil {
		b.t.Fatal(err)
	}
	v := make([]byte, n)
	if err := b.c.DtoH(v, p); err != nil {
		b.t.Fatal(err)
	}
	return v
}

// onDevice runs fn with a launcher of this package and one of gpukernels.
func onDevice(t *testing.T, fn func(q *Launcher, l *gpukernels.Launcher, b *bufs)) {
	t.Helper()
	d := device(t)
	err := d.Do(func(c *cuda.Ctx) error {
		b := &bufs{t: t, c: c}
		defer func() {
			for _, p := range b.ptrs {
				c.Free(p)
			}
		}()
		fn(&Launcher{C: c, K: tqk}, &gpukernels.Launcher{C: c, K: tks}, b)
		return c.Sync()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, _ *bufs, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// same fails unless got and want are bitwise equal.
func same(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, the Go reference gives %v (bitwise expected)", what, i, got[i], want[i])
		}
	}
}

// near fails unless every |got − want| ≤ tol·max(1, |want|).
func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*math.Max(1, math.Abs(float64(want[i]))) {
			t.Fatalf("%s[%d] = %v, the Go reference gives %v (tolerance %g)", what, i, got[i], want[i], tol)
		}
	}
}

// TestResidualKernelsMatchQwen38: the gated residual's kernels against
// qwen38's read and write. The grouped norm is within 1e-6 relative (its
// float64 sum of squares is a block tree on the device, index order on the
// CPU); the write gates within 1e-6 (float64 exp on the device and in Go);
// the rest is bitwise.
func TestResidualKernelsMatchQwen38(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const H, S, T, rk = 96, 4, 3, 16
	SH := S * H
	x, R := randVec(r, T*H, 1), randVec(r, T*SH, 1)
	scale := randVec(r, SH, 0.3)
	for i := range scale {
		scale[i]++
	}
	a, m, c, y := randVec(r, T*rk, 3), randVec(r, T*SH, 3), randVec(r, T*S, 4), randVec(r, T*H, 1)
	onDevice(t, func(q *Launcher, _ *gpukernels.Launcher, b *bufs) {
		dR, dx := b.zeros(T*SH), b.up(x)
		check(t, b, q.Rep(dR, dx, H, S, T))
		rep := b.down(dR, T*SH)
		for tt := range T {
			for s := range S {
				same(t, "rep", rep[tt*SH+s*H:tt*SH+(s+1)*H], x[tt*H:(tt+1)*H])
			}
		}

		dn, dRin, dscale := b.zeros(T*SH), b.up(R), b.up(scale)
		check(t, b, q.GroupedNorm(dn, dRin, dscale, H, S, T, 1e-6))
		wantN := make([]float32, T*SH)
		qwen38.GroupedRMSNorm(wantN, R, scale, H, SH, 1e-6)
		near(t, "grouped norm", b.down(dn, T*SH), wantN, 1e-6)

		da := b.up(a)
		check(t, b, q.HCAct(da, T*rk, S))
		wantA := make([]float32, len(a))
		for i, v := range a {
			wantA[i] = v / S
		}
		kernels.SiLU(wantA, wantA)
		same(t, "silu(a/S)", b.down(da, T*rk), wantA)

		dxm, dm := b.zeros(T*H), b.up(m)
		check(t, b, q.HCMean(dxm, dm, dn, H, S, T))
		rn := b.down(dn, T*SH)
		sig := make([]float32, len(m))
		kernels.Sigmoid(sig, m)
		wantX := make([]float32, T*H)
		for tt := range T {
			for i := range H {
				var acc float32
				for s := 0; s < SH; s += H {
					acc += sig[tt*SH+s+i] * rn[tt*SH+s+i]
				}
				wantX[tt*H+i] = acc / S
			}
		}
		same(t, "stream mean", b.down(dxm, T*H), wantX)

		dc := b.up(c)
		check(t, b, q.HCWriteGates(dc, T*S, S))
		wantC := make([]float32, len(c))
		for i, v := range c {
			wantC[i] = 2 * blocks.Sigmoid32(v/S)
		}
		gates := b.down(dc, T*S)
		near(t, "write gates", gates, wantC, 1e-6)

		dy := b.up(y)
		check(t, b, q.HCWrite(dRin, dc, dy, H, S, T))
		wantR := slices.Clone(R)
		for tt := range T {
			for s := range S {
				for i := range H {
					wantR[tt*SH+s*H+i] += gates[tt*S+s] * y[tt*H+i]
				}
			}
		}
		same(t, "residual write", b.down(dRin, T*SH), wantR)
	})
}

// plePass is the Go reference of q38_ple_conv for one pass (qwen38
// dilatedConv, then z += u and R += z), advancing state.
func plePass(R, u, un, state, w []float32, C, Kp, N, T int) {
	L := (Kp - 1) * N
	src := func(s int) []float32 {
		if s >= 0 {
			return un[s*C : (s+1)*C]
		}
		return state[(L+s)*C : (L+s+1)*C]
	}
	z := make([]float32, T*C)
	window := make([][]float32, Kp)
	for t := range T {
		for j := range Kp {
			window[j] = src(t - N*(Kp-1-j))
		}
		d := z[t*C : (t+1)*C]
		blocks.ConvTaps(d, w, window)
		kernels.SiLU(d, d)
	}
	for i := range z {
		z[i] += u[i]
	}
	blocks.AddTo(R[:T*C], z)
	for r := range L {
		copy(state[r*C:(r+1)*C], src(T-L+r))
	}
}

// TestPLEKernelsMatchQwen38: the PLE gate within 1e-6 (float64 sqrt and
// exp), with a stream whose dot is 0 (gate ½) and one below the 1e-6
// floor; the dilated conv, u and the residual add bitwise over two passes
// (shorter and longer than the (Kp−1)·N state rows).
func TestPLEKernelsMatchQwen38(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const H, S, Kp, N = 64, 4, 4, 3
	C := S * H
	onDevice(t, func(q *Launcher, _ *gpukernels.Launcher, b *bufs) {
		const T = 3
		kn, qn, v := randVec(r, T*C, 1), randVec(r, T*C, 1), randVec(r, T*H, 1)
		clear(kn[0:H])             // token 0, stream 0: dot 0
		for i := H; i < 2*H; i++ { // token 0, stream 1: a tiny dot
			kn[i] = 1e-9
		}
		du := b.zeros(T * C)
		check(t, b, q.PLEGate(du, b.up(kn), b.up(qn), b.up(v), H, S, T, sqrtF32(H)))
		want := make([]float32, T*C)
		for tt := range T {
			for s := 0; s < C; s += H {
				var dot float32
				for i := range H {
					dot += kn[tt*C+s+i] * qn[tt*C+s+i]
				}
				g := blocks.Sigmoid32(qwen38.SignedSqrt(dot / sqrtF32(H)))
				for i := range H {
					want[tt*C+s+i] = g * v[tt*H+i]
				}
			}
		}
		near(t, "PLE gated value", b.down(du, T*C), want, 1e-6)

		L := (Kp - 1) * N
		w, state := randVec(r, C*Kp, 0.5), make([]float32, L*C)
		dw, dstate := b.up(w), b.zeros(L*C)
		for _, T := range []int{2, 13} {
			R, u, un := randVec(r, T*C, 1), randVec(r, T*C, 1), randVec(r, T*C, 1)
			dR := b.up(R)
			check(t, b, q.PLEConv(dR, b.up(u), b.up(un), dstate, dw, C, Kp, N, T))
			plePass(R, u, un, state, w, C, Kp, N, T)
			same(t, "residual after PLE", b.down(dR, T*C), R)
			same(t, "PLE conv state", b.down(dstate, L*C), state)
		}
	})
}

// TestGDNSigmoidKernels: q38_gdn_norm is blocks.GatedNormSigmoid bitwise
// (both sum squares in index order in float64), and q38_gdn_heads is
// bitwise gpukernels' gdn_rec followed by q38_gdn_norm, state included,
// over two passes.
func TestGDNSigmoidKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := gpukernels.GDNShape{Hk: 2, Hv: 6, Dk: 32, Dv: 32}
	s.C = 2*s.Hk*s.Dk + s.Hv*s.Dv
	vd := s.Hv * s.Dv
	const eps = 1e-6
	onDevice(t, func(q *Launcher, l *gpukernels.Launcher, b *bufs) {
		const T = 4
		oraw, z, w := randVec(r, T*vd, 1), randVec(r, T*vd, 2), randVec(r, s.Dv, 0.5)
		do := b.zeros(T * vd)
		check(t, b, q.GDNNorm(do, b.up(oraw), b.up(z), b.up(w), s, eps, T))
		want := slices.Clone(oraw)
		zc := slices.Clone(z)
		for i := 0; i < T*vd; i += s.Dv {
			blocks.GatedNormSigmoid(want[i:i+s.Dv], zc[i:i+s.Dv], w, eps)
		}
		same(t, "sigmoid-gated norm", b.down(do, T*vd), want)

		negExpA, dtBias := randVec(r, s.Hv, 0.5), randVec(r, s.Hv, 0.5)
		for i := range negExpA {
			negExpA[i] = -float32(math.Abs(float64(negExpA[i]))) - 0.1
		}
		dA, dDt, dW := b.up(negExpA), b.up(dtBias), b.up(w)
		S1, S2 := b.zeros(s.Hv*s.Dk*s.Dv), b.zeros(s.Hv*s.Dk*s.Dv)
		for range 2 {
			conv, zz := randVec(r, T*s.C, 1), randVec(r, T*vd, 2)
			ga, gb := randVec(r, T*s.Hv, 1), randVec(r, T*s.Hv, 1)
			dconv, dz, da, db := b.up(conv), b.up(zz), b.up(ga), b.up(gb)
			o1, o2, raw := b.zeros(T*vd), b.zeros(T*vd), b.zeros(T*vd)
			check(t, b, q.GDNHeads(o1, S1, dconv, dz, da, db, dA, dDt, dW, s, eps, T, s.Hv))
			check(t, b, l.GDNRec(raw, S2, dconv, da, db, dA, dDt, s, T, s.Hv))
			check(t, b, q.GDNNorm(o2, raw, dz, dW, s, eps, T))
			same(t, "q38_gdn_heads vs gdn_rec + q38_gdn_norm", b.down(o1, T*vd), b.down(o2, T*vd))
			same(t, "delta-rule state", b.down(S1, s.Hv*s.Dk*s.Dv), b.down(S2, s.Hv*s.Dk*s.Dv))
		}
	})
}

// TestIndexerKernelsMatchQwen38: the raw keys copied exactly; block keys
// (mean, k_layernorm, RoPE at the block's first position) and block scores
// within 1e-6 of qwen38's arithmetic (exact but for the device's float64
// cos and sin); the selection exactly qwen38.TopBlocks over the device's
// scores, also on crafted scores full of ties (the lower block wins); the
// mask exactly the unkept blocks' positions, the tail kept.
func TestIndexerKernelsMatchQwen38(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	is := IndexerShape{Heads: 2, Dim: 16, Half: 4, Block: 4, Keep: 2}
	const eps, pos, T, capacity = 1e-6, 20, 20, 40
	qkw := (is.Heads + 1) * is.Dim
	rope := blocks.NewRope(1e7, 2*is.Half)
	nbMax := capacity / is.Block
	onDevice(t, func(q *Launcher, _ *gpukernels.Launcher, b *bufs) {
		// raw keys of positions 0…pos+T−1: the first pos already cached
		prior := randVec(r, pos*is.Dim, 1)
		qk := randVec(r, T*qkw, 1)
		kraw := make([]float32, capacity*is.Dim)
		copy(kraw, prior)
		dkraw := b.up(kraw)
		dpos, dzero := b.upBytes(cuda.Bytes([]int32{pos})), b.upBytes(cuda.Bytes([]int32{0}))
		check(t, b, q.IndexerKeys(dkraw, b.up(qk), is, dpos, T))
		for tt := range T {
			copy(kraw[(pos+tt)*is.Dim:], qk[tt*qkw+is.Heads*is.Dim:(tt+1)*qkw])
		}
		same(t, "raw indexer keys", b.down(dkraw, capacity*is.Dim), kraw)

		kNorm, qNorm := randVec(r, is.Dim, 0.2), randVec(r, is.Dim, 0.2)
		for i := range kNorm {
			kNorm[i]++
			qNorm[i]++
		}
		dinv := b.up(rope.InvFreq)
		dkb := b.zeros(nbMax * is.Dim)
		nb := (pos + T) / is.Block
		// every block from 0: a pass of pos+T tokens from position 0
		check(t, b, q.IndexerBlocks(dkb, dkraw, b.up(kNorm), dinv, is, dzero, pos+T, eps))
		wantKB := make([]float32, nbMax*is.Dim)
		cos, sin := make([]float32, is.Half), make([]float32, is.Half)
		for blk := range nb {
			mean := wantKB[blk*is.Dim : (blk+1)*is.Dim]
			for tau := blk * is.Block; tau < (blk+1)*is.Block; tau++ {
				blocks.AddTo(mean, kraw[tau*is.Dim:(tau+1)*is.Dim])
			}
			for i := range mean {
				mean[i] /= float32(is.Block)
			}
			blocks.RMSNorm(mean, mean, kNorm, eps)
			rope.Tables(blk*is.Block, cos, sin)
			blocks.Rotate(mean, cos, sin)
		}
		kb := b.down(dkb, nbMax*is.Dim)
		near(t, "block keys", kb, wantKB, 1e-6)
		// decode steps: one token a pass, the position read on the device,
		// complete each block once, bitwise as the pass from 0 did
		dstep := b.zeros(nbMax * is.Dim)
		for p := range pos + T {
			check(t, b, q.IndexerBlocks(dstep, dkraw, b.up(kNorm), dinv, is, b.upBytes(cuda.Bytes([]int32{int32(p)})), 1, eps))
		}
		same(t, "block keys completed token by token", b.down(dstep, nbMax*is.Dim), kb)

		dscores := b.zeros(T * nbMax)
		check(t, b, q.IndexerScores(dscores, b.up(qk), b.up(qNorm), dkb, dinv, is, nbMax, dpos, T, eps, sqrtF32(is.Dim)))
		scores := b.down(dscores, T*nbMax)
		iq := make([]float32, is.Heads*is.Dim)
		for tt := range T {
			p := pos + tt
			n := (p + 1) / is.Block
			if n <= is.Keep {
				continue
			}
			rope.Tables(p, cos, sin)
			for h := range is.Heads {
				qh := iq[h*is.Dim : (h+1)*is.Dim]
				blocks.RMSNorm(qh, qk[tt*qkw+h*is.Dim:tt*qkw+(h+1)*is.Dim], qNorm, eps)
				blocks.Rotate(qh, cos, sin)
			}
			want := make([]float32, n)
			for blk := range n {
				var s float32
				for h := range is.Heads {
					var d float32
					for i := range is.Dim {
						d += iq[h*is.Dim+i] * kb[blk*is.Dim+i]
					}
					s += max(0, d)
				}
				want[blk] = s / sqrtF32(is.Dim)
			}
			near(t, "block scores", scores[tt*nbMax:tt*nbMax+n], want, 1e-6)
		}

		// selection over the device's scores, then over scores full of ties
		tied := make([]float32, T*nbMax)
		for i := range tied {
			tied[i] = float32(r.IntN(3)) // 0, 1, 2: ties everywhere, zeros as relu gives them
		}
		for _, sc := range [][]float32{scores, tied} {
			dkeep := b.upBytes(make([]byte, T*nbMax))
			check(t, b, q.IndexerSelect(dkeep, b.up(sc), is, nbMax, dpos, T))
			keep := b.downBytes(dkeep, T*nbMax)
			for tt := range T {
				n := (pos + tt + 1) / is.Block
				if n <= is.Keep {
					continue
				}
				want := make([]byte, n)
				for _, blk := range qwen38.TopBlocks(sc[tt*nbMax:tt*nbMax+n], is.Keep) {
					want[blk] = 1
				}
				if got := keep[tt*nbMax : tt*nbMax+n]; !slices.Equal(got, want) {
					t.Fatalf("token %d: blocks kept %v, qwen38.TopBlocks keeps %v (scores %v)", tt, got, want, sc[tt*nbMax:tt*nbMax+n])
				}
			}

			const Hq = 3
			attn := randVec(r, T*Hq*capacity, 1)
			dattn := b.up(attn)
			check(t, b, q.launch("q38_qsa_mask", cuda.D2(Hq, T), cuda.D1(256), 0, dattn, dkeep, Hq, capacity, is.Block, is.Keep, nbMax, dpos))
			wantAttn := slices.Clone(attn)
			for tt := range T {
				n := (pos + tt + 1) / is.Block
				if n <= is.Keep {
					continue
				}
				for h := range Hq {
					for s := range n * is.Block {
						if keep[tt*nbMax+s/is.Block] == 0 {
							wantAttn[(tt*Hq+h)*capacity+s] = float32(math.Inf(-1))
						}
					}
				}
			}
			same(t, "masked scores", b.down(dattn, T*Hq*capacity), wantAttn)
		}
	})
}
