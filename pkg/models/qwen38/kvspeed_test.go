package qwen38

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
)

// releaseAttention is the release geometry's attention layer (§1.2: 24
// query heads, 2 KV heads of 256, rotary 64, indexer 4 heads of 128,
// budget 2048 in blocks of 4) over a hidden size of 64, so that the
// projections, which no KV width changes, cost next to nothing.
func releaseAttention(maxContext int) Config {
	return Config{
		VocabSize: 16, HiddenSize: 64, RMSNormEps: 1e-6, MaxContext: maxContext, Streams: 4, LowRank: 4,
		NumHeads: 24, NumKVHeads: 2, HeadDim: 256, RopeTheta: 1e7, RotaryDim: 64,
		IndexerHeads: 4, IndexerDim: 128, IndexerBudget: 2048, IndexerBlock: 4,
		Layers: []LayerKind{SparseAttention},
	}
}

// randomMatrix is a float32 [rows, cols] of normals scaled by 1/√cols.
func randomMatrix(rng *rand.Rand, rows, cols int) *kernels.Matrix {
	data := make([]byte, 4*rows*cols)
	s := 1 / math.Sqrt(float64(cols))
	for i := range rows * cols {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(rng.NormFloat64()*s)))
	}
	return &kernels.Matrix{Rows: rows, Cols: cols, Enc: kernels.F32, Data: data}
}

// attentionOnly is a one-layer model of cfg holding just the attention
// layer's random weights, for timing the mixer.
func attentionOnly(cfg Config, pool *kernels.Pool) *Model {
	rng := rand.New(rand.NewPCG(1, 2))
	H, Hq, Dh, dih := cfg.HiddenSize, cfg.NumHeads, cfg.HeadDim, cfg.IndexerDim
	ones := func(n int) []float32 { return slices.Repeat([]float32{1}, n) }
	w := &attnWeights{
		AttnWeights: blocks.AttnWeights{
			Q: randomMatrix(rng, Hq*2*Dh, H), K: randomMatrix(rng, cfg.kvDim(), H), V: randomMatrix(rng, cfg.kvDim(), H),
			O: randomMatrix(rng, H, Hq*Dh), QNorm: ones(Dh), KNorm: ones(Dh),
		},
		index: randomMatrix(rng, (cfg.IndexerHeads+1)*dih, H), iqNorm: ones(dih), ikNorm: ones(dih),
	}
	return &Model{cfg: cfg, pool: pool, rope: blocks.NewRope(cfg.RopeTheta, cfg.RotaryDim),
		layers: []layer{{kind: SparseAttention, attn: w}}}
}

// decodeAttention runs one decode step of the attention layer (projections,
// indexer, gather, attention, output) for the token after st's and
// advances st.
func decodeAttention(m *Model, st *State, x, y []float32) {
	st.growKV(st.pos + 1)
	m.ropeTables(&st.ws, st.pos, 1)
	m.attnMixer(m.layers[0].attn, &st.layers[0].attn, &st.ws.attn, &st.ws, st.pos, x, y, 1)
	st.pos++
}

// TestAttnDecodeSpeed times a decode step of the release geometry's
// attention layer after NVMAI_KV_SPEED_CONTEXT tokens (default 32,768;
// synthetic K, V and indexer keys) at 8 and 32 bits, the widths alternating
// round by round, and logs each width's fastest and median step and the
// ratio per round (docs/kv-cache.md, "qwen38"). Only with NVMAI_KV_SPEED=1:
//
//	NVMAI_KV_SPEED=1 nice -n 19 go test -count=1 -run TestAttnDecodeSpeed -v ./pkg/models/qwen38
func TestAttnDecodeSpeed(t *testing.T) {
	if os.Getenv("NVMAI_KV_SPEED") != "1" {
		t.Skip("set NVMAI_KV_SPEED=1 to time the attention layer")
	}
	ctx := 32768
	if v := os.Getenv("NVMAI_KV_SPEED_CONTEXT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NVMAI_KV_SPEED_CONTEXT=%q: want a token count", v)
		}
		ctx = n
	}
	const rounds, steps = 10, 32
	pool := kernels.NewPool(0)
	defer pool.Close()
	cfg := releaseAttention(ctx + (rounds+1)*steps)
	m := attentionOnly(cfg, pool)
	x, y := make([]float32, cfg.HiddenSize), make([]float32, cfg.HiddenSize)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	widths := []int{model.KVInt8, model.KVFloat32}
	states := map[int]*State{}
	for _, bits := range widths {
		st := m.NewState(StateOptions{KVBits: bits, KVInitial: cfg.MaxContext, MaxContext: cfg.MaxContext})
		if err := st.FillSynthetic(ctx, 1); err != nil {
			t.Fatal(err)
		}
		for range steps { // untimed: fault the scratch in
			decodeAttention(m, st, x, y)
		}
		states[bits] = st
	}
	times := map[int][]float64{}
	var ratios []float64
	for r := range rounds {
		order := widths
		if r%2 == 1 {
			order = []int{widths[1], widths[0]}
		}
		per := map[int]float64{}
		for _, bits := range order {
			start := time.Now()
			for range steps {
				decodeAttention(m, states[bits], x, y)
			}
			per[bits] = float64(time.Since(start).Microseconds()) / 1000 / steps
			times[bits] = append(times[bits], per[bits])
		}
		ratios = append(ratios, per[model.KVFloat32]/per[model.KVInt8])
	}
	for _, bits := range widths {
		ts := slices.Sorted(slices.Values(times[bits]))
		t.Logf("context %d, kv%d: ms per step: fastest %.2f, median %.2f (rounds %.2f)", ctx, bits, ts[0], ts[len(ts)/2], times[bits])
	}
	rs := slices.Sorted(slices.Values(ratios))
	t.Logf("context %d: float32 time ÷ 8-bit time per round %.2f–%.2f (median %.2f; above 1: 8-bit faster)", ctx, rs[0], rs[len(rs)-1], rs[len(rs)/2])
}
