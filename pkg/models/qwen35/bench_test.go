package qwen35

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// syntheticWeights makes random BF16 weights for any geometry, so the
// benchmarks can run at the real model's layer sizes without its files.
type syntheticWeights struct {
	cfg     Config
	rng     *rand.Rand
	mats    map[string]*kernels.Matrix
	experts map[[2]int]model.ExpertMats
}

func newSyntheticWeights(cfg Config) *syntheticWeights {
	return &syntheticWeights{cfg: cfg, rng: rand.New(rand.NewPCG(1, 2)), mats: map[string]*kernels.Matrix{}, experts: map[[2]int]model.ExpertMats{}}
}

func (s *syntheticWeights) random(rows, cols int, scale float64) *kernels.Matrix {
	data := make([]byte, 2*rows*cols)
	for i := 0; i < rows*cols; i++ {
		v := float32((s.rng.Float64()*2 - 1) * scale)
		binary.LittleEndian.PutUint16(data[2*i:], uint16(math.Float32bits(v)>>16))
	}
	return &kernels.Matrix{Rows: rows, Cols: cols, Enc: kernels.BF16, Data: data}
}

// shape returns a linear weight's [out, in] from its name.
func (s *syntheticWeights) shape(name string) (int, int) {
	c := s.cfg
	H, Dh := c.HiddenSize, c.HeadDim
	switch {
	case strings.HasSuffix(name, "embed_tokens.weight"), name == nameLMHead:
		return c.VocabSize, H
	case strings.HasSuffix(name, "in_proj_qkv.weight"):
		return c.ConvChannels(), H
	case strings.HasSuffix(name, "in_proj_z.weight"):
		return c.valueDim(), H
	case strings.HasSuffix(name, "in_proj_b.weight"), strings.HasSuffix(name, "in_proj_a.weight"):
		return c.LinearValueHeads, H
	case strings.HasSuffix(name, "out_proj.weight"):
		return H, c.valueDim()
	case strings.HasSuffix(name, "q_proj.weight"):
		return 2 * c.NumHeads * Dh, H
	case strings.HasSuffix(name, "k_proj.weight"), strings.HasSuffix(name, "v_proj.weight"):
		return c.kvDim(), H
	case strings.HasSuffix(name, "o_proj.weight"):
		return H, c.NumHeads * Dh
	case strings.HasSuffix(name, "mlp.gate.weight"):
		return c.NumExperts, H
	case strings.HasSuffix(name, "shared_expert_gate.weight"):
		return 1, H
	case strings.HasSuffix(name, "shared_expert.down_proj.weight"):
		return H, c.SharedIntermediate
	case strings.Contains(name, "shared_expert."):
		return c.SharedIntermediate, H
	case strings.HasSuffix(name, "mlp.down_proj.weight"):
		return H, c.Intermediate
	case strings.HasSuffix(name, "mlp.gate_proj.weight"), strings.HasSuffix(name, "mlp.up_proj.weight"):
		return c.Intermediate, H
	}
	panic("synthetic: no shape for " + name)
}

func (s *syntheticWeights) Has(name string) bool { return true }

func (s *syntheticWeights) Matrix(name string) (*kernels.Matrix, error) {
	if m, ok := s.mats[name]; ok {
		return m, nil
	}
	r, c := s.shape(name)
	m := s.random(r, c, 1/math.Sqrt(float64(c)))
	s.mats[name] = m
	return m, nil
}

func (s *syntheticWeights) Vector(name string) ([]float32, error) {
	c := s.cfg
	n := c.HiddenSize
	switch {
	case strings.HasSuffix(name, "conv1d.weight"):
		n = c.ConvChannels() * c.ConvKernel
	case strings.HasSuffix(name, "A_log"), strings.HasSuffix(name, "dt_bias"):
		n = c.LinearValueHeads
	case strings.HasSuffix(name, "linear_attn.norm.weight"):
		n = c.LinearValueDim
	case strings.HasSuffix(name, "q_norm.weight"), strings.HasSuffix(name, "k_norm.weight"):
		n = c.HeadDim
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(s.rng.Float64()*0.2 - 0.1)
	}
	return v, nil
}

func (s *syntheticWeights) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	out := make([]model.ExpertMats, len(ids))
	for i, e := range ids {
		em, ok := s.experts[[2]int{layer, e}]
		if !ok {
			I, H := s.cfg.ExpertIntermediate, s.cfg.HiddenSize
			em = model.ExpertMats{Gate: s.random(I, H, 1/math.Sqrt(float64(H))), Up: s.random(I, H, 1/math.Sqrt(float64(H))), Down: s.random(H, I, 1/math.Sqrt(float64(I)))}
			s.experts[[2]int{layer, e}] = em
		}
		out[i] = em
	}
	return out, func() {}, nil
}

// realLayers is Qwen3.5-35B-A3B's geometry cut to one linear-attention and
// one full-attention layer, 16 experts and a 4096-row vocabulary, so the
// per-layer cost of the real model can be measured in ~200 MB.
func realLayers(tb testing.TB) (*Model, Config) {
	return realLayersOn(tb, nil)
}

// realLayersOn is realLayers running on pool (nil: single-threaded).
func realLayersOn(tb testing.TB, pool *kernels.Pool) (*Model, Config) {
	g := packexperts.Geometry{
		VocabSize: 4096, HiddenSize: 2048, NumLayers: 2, LayerTypes: []string{"linear_attention", "full_attention"},
		RMSNormEps: 1e-6, HiddenAct: "silu", NumAttentionHeads: 16, NumKeyValueHeads: 2, HeadDim: 256,
		RopeTheta: 1e7, PartialRotaryFactor: 0.25, MaxPositionEmbeddings: 262144,
		LinearConvKernelDim: 4, LinearNumKeyHeads: 16, LinearNumValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128,
		NumExperts: 16, NumExpertsPerTok: 8, MoeIntermediateSize: 512, SharedExpertIntermediateSize: 512,
	}
	cfg, err := ConfigFromGeometry(ArchMoE, g)
	if err != nil {
		tb.Fatal(err)
	}
	sw := newSyntheticWeights(cfg)
	m, err := New(cfg, sw, sw, pool)
	if err != nil {
		tb.Fatal(err)
	}
	return m, cfg
}

// fakeContext fills st's caches with random values and sets its length to
// ctx, standing in for a prefill the pure-Go kernels would take minutes on.
func fakeContext(st *State, ctx int) {
	rng := rand.New(rand.NewPCG(3, 4))
	fill := func(x []float32) {
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
	}
	for i := range st.layers {
		ls := &st.layers[i]
		fill(ls.conv)
		fill(ls.rec)
	}
	if err := st.FillSynthetic(ctx, 3); err != nil {
		panic(err)
	}
}

// BenchmarkDecodeRealLayers measures one decode token through a real-sized
// GDN layer and full-attention layer (with its MoE blocks) after a context
// of the given length.
func BenchmarkDecodeRealLayers(b *testing.B) {
	m, cfg := realLayers(b)
	for _, ctx := range []int{16, 4096} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("ctx%d/threads%d", ctx, threads), func(b *testing.B) {
				pool := kernels.NewPool(threads)
				defer pool.Close()
				mp := *m
				mp.pool = pool
				st := mp.NewState(StateOptions{KVInitial: ctx + 1 + b.N})
				fakeContext(st, ctx)
				logits := make([]float32, cfg.VocabSize)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := mp.Forward(st, []int{i % cfg.VocabSize}, logits, false); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkForwardBatch measures a decode step of N sequences together
// (ForwardBatch) through realLayers on two threads, each sequence after a
// 64-token context; ns/seq-step is the time per sequence per step, so
// N = 1 over N = 4 is the aggregate speed-up of batching four streams.
func BenchmarkForwardBatch(b *testing.B) {
	const ctx, warmSteps = 64, 8
	pool := kernels.NewPool(2)
	defer pool.Close()
	m, cfg := realLayersOn(b, pool)
	for _, N := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("N%d", N), func(b *testing.B) {
			states, ids := make([]*State, N), make([]int, N)
			for i := range states {
				states[i] = m.NewState(StateOptions{KVInitial: ctx + 1 + warmSteps + b.N})
				fakeContext(states[i], ctx)
			}
			logits := make([]float32, N*cfg.VocabSize)
			step := func(s int) {
				for i := range ids {
					ids[i] = (s*N + i*977) % cfg.VocabSize
				}
				if err := m.ForwardBatch(states, ids, logits); err != nil {
					b.Fatal(err)
				}
			}
			// Warm up: the synthetic experts are made on first use, and the
			// scratch grows in the first steps.
			for s := range warmSteps {
				step(1_000_000 + s)
			}
			b.ResetTimer()
			for s := range b.N {
				step(s)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*N), "ns/seq-step")
		})
	}
}
