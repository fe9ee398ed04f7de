package qwen38gpu

import (
	"fmt"
	"io"
	"math"
	"os"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/expertstream"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/blocks"
	"github.com/nvmai/nvmai/pkg/models/qwen38"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// DefaultChunk is the most tokens one prefill pass carries; the attention
// scores scratch is 4·chunk·Hq·KV-capacity bytes.
const DefaultChunk = 256

// Model is the decoder's weights in device memory, and the host side of
// the n-gram tables.
type Model struct {
	dev    *cuda.Device
	ks     *gpukernels.Set
	qk     *Kernels
	cfg    qwen38.Config
	g      geometry
	ngrams qwen38.NgramTable

	embed, lmHead *gpukernels.Mat
	mixer         hcW
	layers        []layerW
	ple           []*pleW // by rank among the PLE layers
	invFreq       cuda.DevicePtr

	mma, gdnPipe, gdnPar, gdnReg bool
	noGraph                      bool // NVMAI_GPU_GRAPH=0: decode steps launch kernel by kernel
	chunk                        int
	allocs                       []cuda.DevicePtr
	WeightBytes                  int64 // bytes uploaded

	// opt is the load's choices; free0 and total0 the device memory when
	// Load began (the plan's auto budget). plan is where the routed
	// experts live, stream the streamed ones (nil: resident).
	opt           LoadOptions
	free0, total0 uint64
	plan          expertstream.Plan
	stream        *expertstream.Streamer
}

// hcW is one gated residual's weights (inject nil for the final mixer).
type hcW struct {
	norm             cuda.DevicePtr // 1 + w, [S·H]
	down, up, inject *gpukernels.Mat
}

type pleW struct {
	index, layer                 int
	key, value                   *gpukernels.Mat
	normKey, normQuery, normConv cuda.DevicePtr
	conv                         cuda.DevicePtr // [S·H, Kp]
}

type layerW struct {
	kind          qwen38.LayerKind
	attnHC, mlpHC hcW
	ple           *pleW

	qkv, z, b, a, out              *gpukernels.Mat
	conv, negExpA, dtBias, gdnNorm cuda.DevicePtr
	q, k, v, o, index              *gpukernels.Mat
	qNorm, kNorm, iqNorm, ikNorm   cuda.DevicePtr
	router, sharedG, sGate, sUp    *gpukernels.Mat
	sDown, eGate, eUp, eDown       *gpukernels.Mat
	stream                         *expertstream.Layer // nil: the layer's experts are resident
}

// geometry is the derived sizes the forward pass uses.
type geometry struct {
	H, S, SH, r, V, C, K, vd, kvd, E, k, I, Is, Dp, Kp, N int
	gdn                                                   gpukernels.GDNShape
	attn                                                  gpukernels.AttnShape
	idx                                                   IndexerShape
	eps                                                   float32
}

func newGeometry(c qwen38.Config) geometry {
	g := geometry{H: c.HiddenSize, S: c.Streams, SH: c.StreamWidth(), r: c.LowRank, V: c.VocabSize, C: c.ConvChannels(), K: c.ConvKernel,
		vd: c.LinearValueHeads * c.LinearValueDim, kvd: c.NumKVHeads * c.HeadDim, E: c.NumExperts, k: c.ExpertsPerToken,
		I: c.ExpertIntermediate, Is: c.SharedIntermediate, Dp: c.PLEDim, Kp: c.PLEConvKernel, N: c.NgramSize, eps: c.RMSNormEps}
	g.gdn = gpukernels.GDNShape{C: g.C, Hk: c.LinearKeyHeads, Hv: c.LinearValueHeads, Dk: c.LinearKeyDim, Dv: c.LinearValueDim}
	g.attn = gpukernels.AttnShape{Hq: c.NumHeads, Hkv: c.NumKVHeads, Dh: c.HeadDim, Half: c.RotaryDim / 2}
	g.idx = IndexerShape{Heads: c.IndexerHeads, Dim: c.IndexerDim, Half: c.RotaryDim / 2, Block: c.IndexerBlock, Keep: c.IndexerBlocks()}
	return g
}

// LoadOptions are the engine's choices beyond the install.
type LoadOptions struct {
	// VRAMBudget is the device memory the model may take, trunk included
	// (0: auto, what is free at load less a reserve). The routed experts
	// are resident when it holds them, else streamed (stream.go).
	VRAMBudget int64
	// RAMBudget caps the page-locked RAM streamed experts take (0: the
	// memory available decides); below every expert the host plans the
	// copies from a RAM tier of that size read from disk (stream.go).
	RAMBudget int64
	// MaxContext is the context the plan reserves one sequence's state for
	// (0: expertstream.DefaultPlanContext); KVBits the KV width it counts
	// (0: model.DefaultKVBits).
	MaxContext, KVBits int
	// Slots streams with exactly that many slots a layer whatever the
	// budget (tests; NVMAI_GPU_SLOTS otherwise).
	Slots int
	Log   io.Writer
}

// Load uploads every weight of the qwen4_exp install at dir (resident
// tensors from w, routed experts from the expert files ex describes) to
// dev. ngrams serves the PLE layers' table rows from the host.
func Load(dev *cuda.Device, cfg qwen38.Config, w model.Weights, dir string, ex *packexperts.Experts, ngrams qwen38.NgramTable, opt LoadOptions) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.PLELayers) > 0 && ngrams == nil {
		return nil, fmt.Errorf("qwen38gpu: the config has PLE layers %v but no n-gram table was given", cfg.PLELayers)
	}
	m := &Model{dev: dev, cfg: cfg, g: newGeometry(cfg), ngrams: ngrams, chunk: DefaultChunk, opt: opt,
		mma: os.Getenv("NVMAI_GPU_MMA") != "0" && dev.Arch >= 80}
	m.gdnPipe = os.Getenv("NVMAI_GPU_GDNPIPE") != "0"
	m.gdnPar = m.gdnPipe && os.Getenv("NVMAI_GPU_GDNPAR") != "0"
	m.gdnReg = m.gdnPar && os.Getenv("NVMAI_GPU_GDNREG") != "0"
	m.noGraph = os.Getenv("NVMAI_GPU_GRAPH") == "0"
	if ex == nil {
		return nil, fmt.Errorf("qwen38gpu: a qwen4_exp install needs routed experts; the manifest lists none")
	}
	err := dev.Do(func(c *cuda.Ctx) error {
		var err error
		if m.free0, m.total0, err = c.MemInfo(); err != nil {
			return err
		}
		if m.ks, err = gpukernels.Load(c); err != nil {
			return err
		}
		if m.qk, err = LoadKernels(c); err != nil {
			return err
		}
		if err := m.upload(c, w); err != nil {
			return err
		}
		if m.plan, err = m.planExperts(ex); err != nil {
			return err
		}
		if !m.plan.Resident() {
			return m.streamExperts(c, dir, ex)
		}
		u := &devshared.Uploader{C: c, W: w, Engine: "qwen38gpu", Allocs: &m.allocs, WeightBytes: &m.WeightBytes}
		return m.uploadExperts(u, dir, ex)
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	if opt.Log != nil {
		for _, line := range m.plan.Lines() {
			fmt.Fprintln(opt.Log, line)
		}
		fmt.Fprintf(opt.Log, "gpu plan: qwen4_exp, %d MiB of weights in VRAM; n-gram tables read on the host\n", m.WeightBytes>>20)
	}
	return m, nil
}

// uploader is devshared's, with the hyper-connection weights of a block.
type uploader struct {
	*devshared.Uploader
	m *Model
}

func (u *uploader) hc(prefix string, inject bool) hcW {
	g := u.m.g
	h := hcW{norm: u.Vector(prefix+"hc_norm.weight", g.SH, true),
		down: u.Matrix(prefix+"input_mix_weight_down.weight", g.r, g.SH),
		up:   u.Matrix(prefix+"input_mix_weight_up.weight", g.SH, g.r)}
	if inject {
		h.inject = u.Matrix(prefix+"block_inject_weight.weight", g.S, g.SH)
	}
	return h
}

// upload uploads every weight but the routed experts (the trunk, which the
// plan counts before it places the experts).
func (m *Model) upload(c *cuda.Ctx, w model.Weights) error {
	cfg, g := m.cfg, m.g
	u := &uploader{m: m, Uploader: &devshared.Uploader{C: c, W: w, Engine: "qwen38gpu", Allocs: &m.allocs, WeightBytes: &m.WeightBytes}}
	m.embed = u.Matrix("model.embed_tokens.weight", g.V, g.H)
	m.lmHead = u.Matrix("lm_head.weight", g.V, g.H)
	m.mixer = u.hc("model.hyper_connection_mixer.", false)
	m.invFreq = u.Bytes(cuda.Bytes(blocks.NewRope(cfg.RopeTheta, cfg.RotaryDim).InvFreq))
	m.layers = make([]layerW, len(cfg.Layers))
	for i, kind := range cfg.Layers {
		m.layers[i] = m.uploadLayer(u, i, kind)
	}
	for k, l := range cfg.PLELayers {
		n := func(s string) string { return blocks.LayerPrefix(l) + "ple." + s }
		p := &pleW{index: k, layer: l,
			key:       u.Matrix(n("key_proj.weight"), g.SH, g.Dp),
			value:     u.Matrix(n("value_proj.weight"), g.H, g.Dp),
			normKey:   u.Vector(n("norm_key.weight"), g.SH, true),
			normQuery: u.Vector(n("norm_query.weight"), g.SH, true),
			normConv:  u.Vector(n("norm_conv.weight"), g.SH, true),
			conv:      u.Vector(n("conv1d.weight"), g.SH*g.Kp, false)}
		m.layers[l].ple = p
		m.ple = append(m.ple, p)
	}
	return u.Err
}

func (m *Model) uploadLayer(u *uploader, i int, kind qwen38.LayerKind) layerW {
	cfg, g := m.cfg, m.g
	n := func(s string) string { return blocks.LayerPrefix(i) + s }
	ly := layerW{kind: kind, attnHC: u.hc(n("attn_hyper_connection."), true), mlpHC: u.hc(n("mlp_hyper_connection."), true)}
	switch kind {
	case qwen38.LinearAttention:
		Hv := cfg.LinearValueHeads
		ly.qkv = u.Matrix(n("linear_attn.in_proj_qkv.weight"), g.C, g.H)
		ly.z = u.Matrix(n("linear_attn.in_proj_z.weight"), g.vd, g.H)
		ly.b = u.Matrix(n("linear_attn.in_proj_b.weight"), Hv, g.H)
		ly.a = u.Matrix(n("linear_attn.in_proj_a.weight"), Hv, g.H)
		ly.out = u.Matrix(n("linear_attn.out_proj.weight"), g.H, g.vd)
		ly.conv = u.Vector(n("linear_attn.conv1d.weight"), g.C*g.K, false)
		ly.dtBias = u.Vector(n("linear_attn.dt_bias"), Hv, false)
		ly.gdnNorm = u.Vector(n("linear_attn.norm.weight"), cfg.LinearValueDim, false)
		if u.Err == nil {
			aLog, err := u.W.Vector(n("linear_attn.A_log"))
			if err != nil || len(aLog) != Hv {
				u.Err = fmt.Errorf("qwen38gpu: tensor %s: missing or not %d values", n("linear_attn.A_log"), Hv)
			} else {
				neg := make([]float32, Hv)
				for h, v := range aLog {
					neg[h] = -blocks.Exp32(v) // as blocks.Loader.GDN
				}
				ly.negExpA = u.Bytes(cuda.Bytes(neg))
			}
		}
	case qwen38.SparseAttention:
		Dh, dih := cfg.HeadDim, cfg.IndexerDim
		ly.q = u.Matrix(n("self_attn.q_proj.weight"), 2*cfg.NumHeads*Dh, g.H)
		ly.k = u.Matrix(n("self_attn.k_proj.weight"), g.kvd, g.H)
		ly.v = u.Matrix(n("self_attn.v_proj.weight"), g.kvd, g.H)
		ly.o = u.Matrix(n("self_attn.o_proj.weight"), g.H, cfg.NumHeads*Dh)
		ly.qNorm = u.Vector(n("self_attn.q_norm.weight"), Dh, true)
		ly.kNorm = u.Vector(n("self_attn.k_norm.weight"), Dh, true)
		ly.index = u.Matrix(n("self_attn.indexer.index_qk_proj.weight"), (cfg.IndexerHeads+1)*dih, g.H)
		ly.iqNorm = u.Vector(n("self_attn.indexer.q_layernorm.weight"), dih, true)
		ly.ikNorm = u.Vector(n("self_attn.indexer.k_layernorm.weight"), dih, true)
	}
	ly.router = u.Matrix(n("mlp.gate.weight"), g.E, g.H)
	ly.sGate = u.Matrix(n("mlp.shared_expert.gate_proj.weight"), g.Is, g.H)
	ly.sUp = u.Matrix(n("mlp.shared_expert.up_proj.weight"), g.Is, g.H)
	ly.sDown = u.Matrix(n("mlp.shared_expert.down_proj.weight"), g.H, g.Is)
	ly.sharedG = u.Matrix(n("mlp.shared_expert_gate.weight"), 1, g.H)
	return ly
}

// uploadExperts copies each MoE layer's expert file whole into one device
// buffer: expert e's matrices sit e·Stride after expert 0's, which is what
// the gathered products index with the ids route wrote (as pkg/gpu).
func (m *Model) uploadExperts(u *devshared.Uploader, dir string, ex *packexperts.Experts) error {
	g := m.g
	if ex == nil {
		return fmt.Errorf("qwen38gpu: a qwen4_exp install needs routed experts; the manifest lists none")
	}
	x, err := devshared.ExpertLayout("qwen38gpu", ex, g.E, g.k)
	if err != nil {
		return err
	}
	return x.Resident(u, dir, len(m.layers), func(i int, gate, up, down *gpukernels.Mat) {
		ly := &m.layers[i]
		ly.eGate, ly.eUp, ly.eDown = gate, up, down
	})
}

// Close frees the weights.
func (m *Model) Close() {
	if m.dev == nil {
		return
	}
	m.dev.Do(func(c *cuda.Ctx) error {
		if m.stream != nil {
			m.stream.FreeHost(c)
		}
		for _, p := range m.allocs {
			c.Free(p)
		}
		return nil
	})
	m.allocs = nil
}

// Config is the model's geometry.
func (m *Model) Config() qwen38.Config { return m.cfg }

// sqrtF32 is float32(math.Sqrt(float64(n))), as qwen38 forms √H and √dih.
func sqrtF32(n int) float32 { return float32(math.Sqrt(float64(n))) }
