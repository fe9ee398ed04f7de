// Package gpu is nvmai's GPU engine: the Qwen3.5 decoder (qwen3_5_moe and
// qwen3_5) with every weight resident in VRAM, run by the CUDA kernels of
// pkg/gpu/gpukernels through the purego bindings of pkg/gpu/cuda (no cgo). It reads
// the install format unchanged and plugs into pkg/runtime as a Backend.
//
// It follows the CPU engine's math (pkg/models/qwen35) operation for
// operation: Q4/Q8 products through int8 activations are bitwise the CPU's,
// float products and the reductions of norms and softmaxes differ only in
// summation order.
package gpu

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Weights is what the engine reads from an install (runtime.Install).
type Weights interface {
	qwen35.Weights
}

// Model is the decoder's weights in device memory.
type Model struct {
	dev  *cuda.Device
	ks   *gpukernels.Set
	cfg  qwen35.Config
	geom geometry

	embed, lmHead *gpukernels.Mat
	norm          cuda.DevicePtr
	invFreq       cuda.DevicePtr
	layers        []layerW

	// fuse runs decode steps with the fused launches (mgemv, moe_down), on
	// unless NVMAI_GPU_FUSE=0. group runs prefill's expert products expert
	// by expert (moe_group, qgemv_grouped / qgemm_grouped_mma): on with the
	// tensor cores (mma), where it is faster (2,263–2,268 against
	// 1,979–1,982 tok/s for 512 tokens on the H200, and the fixture
	// fidelity suite passed with it), off with CUDA-core dots, where it is
	// slower (70 against 54 ms a 256-token chunk). NVMAI_GPU_GROUP=0 or 1
	// overrides. Bitwise the same either way.
	fuse, group bool
	// splitGDN runs the delta rule 32 columns a block (gdn_rec, gdn_norm)
	// instead of a block a head (gdn_heads); NVMAI_GPU_GDNSPLIT=0 turns it
	// off. Bitwise the same.
	splitGDN bool
	// mma runs prefill's Q4/Q8 products on the integer tensor cores
	// (sm_80 and newer; NVMAI_GPU_MMA=0 turns it off): 1,968 against
	// 1,192 tok/s for a 512-token prompt on the H200. Bitwise the same.
	mma bool
	// chunk is the most tokens one prefill pass carries (NVMAI_GPU_CHUNK,
	// default DefaultChunk, at most MaxChunkLimit): a longer chunk gives each
	// grouped expert more rows. Bitwise the same for any length.
	chunk int
	// gdnPipe runs the delta rule as gdn_rec_pipe (NVMAI_GPU_GDNPIPE=0 turns
	// it off): bitwise gdn_rec.
	gdnPipe bool
	// gdnPar runs it as gdn_rec_par (NVMAI_GPU_GDNPAR=0 turns it off):
	// bitwise gdn_rec.
	gdnPar bool
	// gdnReg runs it as gdn_rec_reg, the state in registers
	// (NVMAI_GPU_GDNREG=0 keeps gdn_rec_par): bitwise gdn_rec.
	gdnReg bool

	// opt is the load's choices; free0 and total0 the device memory when
	// Load began; plan where the experts live (PlanExperts); stream the
	// streamed experts (nil when resident).
	opt           LoadOptions
	free0, total0 uint64
	plan          Plan
	stream        *streamer
	batch         *batcher // the batched step's scratch and graphs (batch.go)
	allocs        []cuda.DevicePtr
	WeightBytes   int64 // bytes uploaded
	TokenBytes    int64 // weight bytes one decode token reads
	phaseBytes    map[string]int64
}

type layerW struct {
	kind              qwen35.LayerKind
	inNorm, postNorm  cuda.DevicePtr
	qkv, z, b, a, out *gpukernels.Mat
	conv, negExpA     cuda.DevicePtr
	dtBias, gdnNorm   cuda.DevicePtr
	q, k, v, o        *gpukernels.Mat
	qNorm, kNorm      cuda.DevicePtr
	router, sharedG   *gpukernels.Mat
	// ab is a over b, routerG the router over the shared-expert gate, when
	// each pair shares an encoding: one launch each instead of two.
	ab, routerG       *gpukernels.Mat
	sGate, sUp, sDown *gpukernels.Mat
	eGate, eUp, eDown *gpukernels.Mat
	gate, up, down    *gpukernels.Mat
	// moeFused: the routed and shared experts share one quantized shape,
	// so a decode step runs them as one gate+up launch and one moe_down.
	moeFused bool
	// moeGrouped: the routed experts are quantized, so prefill can run
	// them expert by expert.
	moeGrouped bool
	// stream is the layer's streamed experts (nil: resident); eGate, eUp
	// and eDown then address the prefill staging buffer.
	stream *streamLayer
}

// geometry is the derived sizes the forward pass uses.
type geometry struct {
	H, V, C, K, kd, vd, kvd, E, k, I, Is, Inter int
	gdn                                         gpukernels.GDNShape
	attn                                        gpukernels.AttnShape
	eps                                         float32
}

func newGeometry(c qwen35.Config) geometry {
	g := geometry{H: c.HiddenSize, V: c.VocabSize, C: c.ConvChannels(), K: c.ConvKernel,
		kd: c.LinearKeyHeads * c.LinearKeyDim, vd: c.LinearValueHeads * c.LinearValueDim, kvd: c.NumKVHeads * c.HeadDim,
		E: c.NumExperts, k: c.ExpertsPerToken, I: c.ExpertIntermediate, Is: c.SharedIntermediate, Inter: c.Intermediate,
		eps: c.RMSNormEps}
	g.gdn = gpukernels.GDNShape{C: g.C, Hk: c.LinearKeyHeads, Hv: c.LinearValueHeads, Dk: c.LinearKeyDim, Dv: c.LinearValueDim}
	g.attn = gpukernels.AttnShape{Hq: c.NumHeads, Hkv: c.NumKVHeads, Dh: c.HeadDim, Half: c.RotaryDim / 2}
	return g
}

// LoadOptions are the engine's choices beyond the install.
type LoadOptions struct {
	// VRAMBudget is the device memory the model may take, trunk, one
	// sequence's state and experts together; 0 is auto: the memory free
	// when Load begins less a reserve (autoReserve). When every expert
	// fits, they are resident; else they stream (docs/gpu.md).
	VRAMBudget int64
	// RAMBudget (--ram-budget; 0: not set) bounds the page-locked RAM
	// streamed experts take: below every expert, the host plans the
	// copies from a RAM tier of that size read from disk (streamhost.go).
	RAMBudget int64
	// MaxContext is the context the plan reserves one sequence's state
	// for (0: DefaultPlanContext).
	MaxContext int
	// KVBits is the sessions' KV width (--kv-bits), which the plan counts
	// one sequence's KV cache at: model.KVFloat32, KVBF16 or KVInt8; 0 is
	// model.DefaultKVBits, the runtime's default.
	KVBits int
	// Log gets the plan's lines (nil: none).
	Log io.Writer
}

// kvBits is the KV width the plan and the bench count (LoadOptions.KVBits).
func (m *Model) kvBits() int { return cmp.Or(m.opt.KVBits, model.DefaultKVBits) }

// Load uploads every weight of the install at dir (resident tensors from w,
// routed experts from the expert files described by ex) to dev, with the
// default options (an auto VRAM budget).
func Load(dev *cuda.Device, cfg qwen35.Config, w Weights, dir string, ex *packexperts.Experts) (*Model, error) {
	return LoadWith(dev, cfg, w, dir, ex, LoadOptions{})
}

// LoadWith is Load with options: the routed experts are resident when the
// VRAM budget holds them, else streamed.
func LoadWith(dev *cuda.Device, cfg qwen35.Config, w Weights, dir string, ex *packexperts.Experts, opt LoadOptions) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opt.KVBits != 0 && !model.ValidKVBits(opt.KVBits) {
		return nil, fmt.Errorf("gpu: a KV cache of %d bits; use 8, 16 or 32", opt.KVBits)
	}
	m := &Model{dev: dev, cfg: cfg, geom: newGeometry(cfg), opt: opt, fuse: os.Getenv("NVMAI_GPU_FUSE") != "0",
		splitGDN: os.Getenv("NVMAI_GPU_GDNSPLIT") != "0", mma: os.Getenv("NVMAI_GPU_MMA") != "0" && dev.Arch >= 80}
	m.group = groupedPrefill(os.Getenv("NVMAI_GPU_GROUP"), m.mma)
	m.gdnPipe = os.Getenv("NVMAI_GPU_GDNPIPE") != "0"
	m.gdnPar = m.gdnPipe && os.Getenv("NVMAI_GPU_GDNPAR") != "0"
	m.gdnReg = m.gdnPar && os.Getenv("NVMAI_GPU_GDNREG") != "0"
	var err error
	if m.chunk, err = chunkFromEnv(os.Getenv("NVMAI_GPU_CHUNK")); err != nil {
		return nil, err
	}
	err = dev.Do(func(c *cuda.Ctx) error {
		var err error
		if m.free0, m.total0, err = c.MemInfo(); err != nil {
			return err
		}
		ks, err := gpukernels.Load(c)
		if err != nil {
			return err
		}
		m.ks = ks
		return m.upload(c, w, dir, ex)
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	if opt.Log != nil && cfg.Arch == qwen35.ArchMoE {
		for _, line := range m.plan.Lines() {
			fmt.Fprintln(opt.Log, line)
		}
	}
	return m, nil
}

// uploader is devshared's, counting each matrix in a decode step's reads
// under the phase that uploads it.
type uploader struct {
	*devshared.Uploader
	phase string // whose bytes Matrix counts
}

func layerName(i int, s string) string { return fmt.Sprintf("model.layers.%d.%s", i, s) }

func (m *Model) upload(c *cuda.Ctx, w Weights, dir string, ex *packexperts.Experts) error {
	cfg, g := m.cfg, m.geom
	m.phaseBytes = map[string]int64{}
	u := &uploader{phase: PhaseEmbed}
	u.Uploader = &devshared.Uploader{C: c, W: w, Engine: "gpu", Allocs: &m.allocs, WeightBytes: &m.WeightBytes,
		Matrices: func(n int64) { m.TokenBytes += n; m.phaseBytes[u.phase] += n }}
	m.embed = u.Matrix("model.embed_tokens.weight", g.V, g.H)
	m.TokenBytes, m.phaseBytes[PhaseEmbed] = 0, 0 // one row a token, not the table
	u.phase = PhaseHead
	m.norm = u.Vector("model.norm.weight", g.H, true)
	switch {
	case w.Has("lm_head.weight"):
		m.lmHead = u.Matrix("lm_head.weight", g.V, g.H)
	case cfg.TiedEmbeddings:
		m.lmHead = m.embed
		if km, err := w.Matrix("model.embed_tokens.weight"); err == nil {
			n := int64(len(km.Data) + len(km.Scales) + len(km.Biases))
			m.TokenBytes += n
			m.phaseBytes[PhaseHead] += n
		}
	default:
		return fmt.Errorf("gpu: tensor lm_head.weight is missing and tie_word_embeddings is false; the install is incomplete")
	}
	m.invFreq = u.Floats(invFreq(cfg.RopeTheta, cfg.RotaryDim))
	m.layers = make([]layerW, len(cfg.Layers))
	for i, kind := range cfg.Layers {
		m.layers[i] = m.uploadLayer(u, i, kind)
	}
	if u.Err != nil {
		return u.Err
	}
	if cfg.Arch == qwen35.ArchMoE {
		return m.uploadExperts(u, dir, ex)
	}
	return nil
}

func (m *Model) uploadLayer(u *uploader, i int, kind qwen35.LayerKind) layerW {
	cfg, g := m.cfg, m.geom
	n := func(s string) string { return layerName(i, s) }
	u.phase = PhaseGDN
	if kind == qwen35.FullAttention {
		u.phase = PhaseAttention
	}
	ly := layerW{kind: kind, inNorm: u.Vector(n("input_layernorm.weight"), g.H, true), postNorm: u.Vector(n("post_attention_layernorm.weight"), g.H, true)}
	switch kind {
	case qwen35.LinearAttention:
		Hv := cfg.LinearValueHeads
		ly.qkv = u.Matrix(n("linear_attn.in_proj_qkv.weight"), g.C, g.H)
		ly.z = u.Matrix(n("linear_attn.in_proj_z.weight"), g.vd, g.H)
		ly.b = u.Matrix(n("linear_attn.in_proj_b.weight"), Hv, g.H)
		ly.a = u.Matrix(n("linear_attn.in_proj_a.weight"), Hv, g.H)
		ly.out = u.Matrix(n("linear_attn.out_proj.weight"), g.H, g.vd)
		ly.ab = u.Stacked([]string{n("linear_attn.in_proj_a.weight"), n("linear_attn.in_proj_b.weight")}, []int{Hv, Hv}, g.H)
		ly.conv = u.Vector(n("linear_attn.conv1d.weight"), g.C*g.K, false)
		ly.dtBias = u.Vector(n("linear_attn.dt_bias"), Hv, false)
		ly.gdnNorm = u.Vector(n("linear_attn.norm.weight"), cfg.LinearValueDim, false)
		if aLog, err := u.W.Vector(n("linear_attn.A_log")); err == nil && len(aLog) == Hv {
			neg := make([]float32, Hv)
			for h, v := range aLog {
				neg[h] = -float32(math.Exp(float64(v))) // qwen35: −exp32(A_log)
			}
			ly.negExpA = u.Floats(neg)
		} else if u.Err == nil {
			u.Err = fmt.Errorf("gpu: tensor %s: missing or not %d values", n("linear_attn.A_log"), Hv)
		}
	case qwen35.FullAttention:
		Dh := cfg.HeadDim
		ly.q = u.Matrix(n("self_attn.q_proj.weight"), 2*cfg.NumHeads*Dh, g.H)
		ly.k = u.Matrix(n("self_attn.k_proj.weight"), g.kvd, g.H)
		ly.v = u.Matrix(n("self_attn.v_proj.weight"), g.kvd, g.H)
		ly.o = u.Matrix(n("self_attn.o_proj.weight"), g.H, cfg.NumHeads*Dh)
		ly.qNorm = u.Vector(n("self_attn.q_norm.weight"), Dh, true)
		ly.kNorm = u.Vector(n("self_attn.k_norm.weight"), Dh, true)
	}
	u.phase = PhaseMLP
	if cfg.Arch == qwen35.ArchMoE {
		u.phase = PhaseMoE
		ly.router = u.Matrix(n("mlp.gate.weight"), g.E, g.H)
		ly.sGate = u.Matrix(n("mlp.shared_expert.gate_proj.weight"), g.Is, g.H)
		ly.sUp = u.Matrix(n("mlp.shared_expert.up_proj.weight"), g.Is, g.H)
		ly.sDown = u.Matrix(n("mlp.shared_expert.down_proj.weight"), g.H, g.Is)
		ly.sharedG = u.Matrix(n("mlp.shared_expert_gate.weight"), 1, g.H)
		ly.routerG = u.Stacked([]string{n("mlp.gate.weight"), n("mlp.shared_expert_gate.weight")}, []int{g.E, 1}, g.H)
	} else {
		ly.gate = u.Matrix(n("mlp.gate_proj.weight"), g.Inter, g.H)
		ly.up = u.Matrix(n("mlp.up_proj.weight"), g.Inter, g.H)
		ly.down = u.Matrix(n("mlp.down_proj.weight"), g.H, g.Inter)
	}
	return ly
}

// uploadExperts copies each MoE layer's expert file whole into one device
// buffer: expert e's matrices sit e·Stride after expert 0's, which is what
// the gathered GEMV indexes with the ids route wrote.
func (m *Model) uploadExperts(u *uploader, dir string, ex *packexperts.Experts) error {
	g := m.geom
	if ex == nil {
		return fmt.Errorf("gpu: architecture %s needs routed experts; the manifest lists none", m.cfg.Arch)
	}
	x, err := devshared.ExpertLayout("gpu", ex, g.E, g.k)
	if err != nil {
		return err
	}
	plan, err := m.planExperts(ex)
	if err != nil {
		return err
	}
	m.plan = plan
	if !plan.Resident() {
		return m.streamExperts(u.C, plan, dir, ex, x.ByLayer, x.Gate, x.Up, x.Down, x.Offsets)
	}
	return x.Resident(u.Uploader, dir, len(m.layers), func(i int, gate, up, down *gpukernels.Mat) {
		ly := &m.layers[i]
		ly.eGate, ly.eUp, ly.eDown = gate, up, down
		for _, mt := range []*kernels.Matrix{x.Gate, x.Up, x.Down} {
			n := int64(g.k) * int64(len(mt.Data)+len(mt.Scales)+len(mt.Biases))
			m.TokenBytes += n
			m.phaseBytes[PhaseMoE] += n
		}
		ly.moeGrouped = ly.eGate.Quantized() && ly.eUp.Quantized() && ly.eDown.Quantized()
		ly.moeFused = ly.moeGrouped && g.Is == g.I && ly.sGate.Quantized() && ly.sUp.Quantized() &&
			ly.sDown.Enc == ly.eDown.Enc && ly.sDown.Rows == ly.eDown.Rows && ly.sDown.Cols == ly.eDown.Cols
	})
}

// invFreq is qwen35's RoPE inverse frequencies, computed the same way.
func invFreq(theta float64, rd int) []float32 {
	inv := make([]float32, rd/2)
	for j := range inv {
		exponent := float32(2*j) / float32(rd)
		inv[j] = 1 / float32(math.Pow(theta, float64(exponent)))
	}
	return inv
}

// Close frees the weights.
func (m *Model) Close() {
	if m.dev == nil {
		return
	}
	m.dev.Do(func(c *cuda.Ctx) error {
		for _, p := range m.allocs {
			c.Free(p)
		}
		if m.stream != nil {
			m.stream.freeHost(c)
		}
		if m.batch != nil {
			m.batch.close(c)
		}
		return nil
	})
	m.allocs, m.batch = nil, nil
}

// Config is the model's geometry.
func (m *Model) Config() qwen35.Config { return m.cfg }

// groupedPrefill decides Model.group from NVMAI_GPU_GROUP and whether the
// tensor cores run prefill.
func groupedPrefill(env string, mma bool) bool {
	switch env {
	case "0":
		return false
	case "1":
		return true
	}
	return mma
}

// chunkFromEnv reads NVMAI_GPU_CHUNK: prefill tokens per pass.
func chunkFromEnv(v string) (int, error) {
	if v == "" {
		return DefaultChunk, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxChunkLimit {
		return 0, fmt.Errorf("gpu: NVMAI_GPU_CHUNK=%q: want a number of tokens from 1 to %d", v, MaxChunkLimit)
	}
	return n, nil
}
