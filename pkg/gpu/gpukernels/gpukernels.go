// Package gpukernels holds nvmai's CUDA C kernels (kernels.cu, embedded)
// and typed launchers for them. Each kernel names the Go reference it
// reproduces (pkg/kernels, pkg/models/qwen35); the tests on a GPU machine
// compare them (NVMAI_GPU=1).
package gpukernels

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
	kvblocks "github.com/nvmai/nvmai/pkg/models/blocks"
)

//go:embed kernels.cu
var Source string

// Names lists every kernel of Source.
var Names = []string{"embed", "rmsnorm", "add", "swiglu", "quantize", "swiglu_q", "rmsnorm_q", "qgemv", "qgemv_tb", "fgemv", "mgemv", "moe_down", "moe_group", "moe_group_seq", "qgemv_grouped", "qgemm_mma", "qgemm_grouped_mma", "qgemm_mma2", "qgemm_mma2_s", "qgemm_grouped_mma2", "fgemm_tiled", "gdn_conv", "gdn_conv_seq", "gdn_heads", "gdn_rec", "gdn_rec_pipe", "gdn_rec_par", "gdn_rec_reg", "gdn_norm", "attn_kv", "attn_scores", "attn_values", "attn_kv_q8", "attn_scores_q8", "attn_values_q8", "attn_kv_bf16", "attn_scores_bf16", "attn_values_bf16", "route", "combine", "argmax", "topk_cand", "pexp_eval", "samp_count", "samp_pen", "samp_rows", "samp_nucleus", "samp_draw", "samp_cand", "advance", "slot_resolve", "slot_fill", "expert_need", "expert_stage", "slot_prefetch", "slot_fill_ahead", "gdn_rec_reg_rows", "gdn_conv_rows", "attn_kv_q8_rows", "attn_kv_bf16_rows", "attn_scores_q8_rows", "attn_scores_bf16_rows", "attn_values_q8_rows", "attn_values_bf16_rows", "head_rows",
	"attn_qnorm", "attn_scores_t", "attn_scores_t_q8", "attn_scores_t_bf16", "attn_softmax_t", "attn_values_t", "attn_values_t_q8", "attn_values_t_bf16", "mgemv_n"}

// qTokenBlock is kernels.cu's QTB.
const qTokenBlock = 8

// MaxGDNShared is the shared memory gdn_heads may take: its state of one
// head (Dk·Dv floats, 64 KiB for Qwen3.5) plus q, k and o.
const MaxGDNShared = 100 << 10

// Set is the loaded module with its kernels.
type Set struct {
	f map[string]*cuda.Function
	// MMA2 runs a Launcher's tensor-core products (Launcher.MMA) as the
	// tiled qgemm_mma2 and qgemm_grouped_mma2 where the shape fits
	// (bitwise qgemm_mma), multi-token float products as fgemm_tiled
	// (bitwise fgemv), the conv's tokens in parallel (gdn_conv) and the
	// chunk's grouping by warp ranks (moe_group); off, those run the
	// kernels earlier sessions validated on a GPU (qgemm_mma, fgemv,
	// gdn_conv_seq, moe_group_seq). On by default where MMA2Capable
	// (validated on an H100 in session 19: bitwise, prefill 512 3,386–3,394
	// → 4,133–4,155 tok/s); NVMAI_GPU_MMA2=0 keeps the earlier kernels.
	MMA2   bool
	mma2OK bool // the tiled kernels have their shared memory (MMA2Capable)
	// AttnTiled runs a multi-token chunk's attention (AttnHeads with T > 1)
	// as attn_qnorm, attn_scores_t*, attn_softmax_t and attn_values_t*:
	// bitwise attn_scores and attn_values, each cached row read once per
	// tile of 32 (token, head) rows instead of once per row. On by default
	// (validated on an H100 in session 19); NVMAI_GPU_ATTN_TILED=0 keeps
	// attn_scores and attn_values for chunks too.
	AttnTiled   bool
	attnTiledOK bool
	// NormFold runs a decode step's RMSNorm and the products that read it
	// as one launch (Launcher.MGEMVNorm, mgemv_n): bitwise the two, but
	// measured slower on an H100 (decode 243–245 against 284–285 tok/s:
	// every block pays the norm before its first weight load, and its
	// 48 KiB of shared memory cut the blocks a multiprocessor holds), so it
	// is on only with NVMAI_GPU_NORMFOLD=1.
	NormFold bool
	sms      int // the GPU's multiprocessors (the grouped kernel's grid)
}

// AttnTiledCapable reports whether the tiled prefill attention could run
// on this GPU (its scores kernel has its shared memory), whatever
// NVMAI_GPU_ATTN_TILED says.
func (s *Set) AttnTiledCapable() bool { return s.attnTiledOK }

// MaxAttnTiledShared is the shared memory attn_scores_t may take: the
// tile's 32 queries and 32 keys at a pitch of Dh+1 floats (65.8 KiB at
// Dh 256).
const MaxAttnTiledShared = 100 << 10

// attnTiledShared is attn_scores_t's shared memory at head size dh
// (kernels.cu's ATT_TR + ATT_TS rows).
func attnTiledShared(dh int) int { return (attnTileRows + attnTileRows) * (dh + 1) * 4 }

// attnTileRows is kernels.cu's ATT_TR (and ATT_TS): the (token, head)
// rows, and the cached positions, of one tile.
const attnTileRows = 32

// MMA2Capable reports whether the tiled kernels could run on this GPU
// (they have their shared memory), whatever NVMAI_GPU_MMA2 says.
func (s *Set) MMA2Capable() bool { return s.mma2OK }

// Load compiles (or reads from the cubin cache) and loads the kernels.
func Load(c *cuda.Ctx) (*Set, error) {
	m, err := c.LoadSource(Source, "nvmai_kernels.cu")
	if err != nil {
		return nil, err
	}
	s := &Set{f: map[string]*cuda.Function{}}
	for _, n := range Names {
		f, err := c.Func(m, n)
		if err != nil {
			return nil, err
		}
		s.f[n] = f
	}
	for _, n := range []string{"gdn_heads", "gdn_rec_par", "gdn_rec_reg", "gdn_rec_reg_rows"} {
		if err := c.SetMaxDynamicShared(s.f[n], MaxGDNShared); err != nil {
			return nil, err
		}
	}
	s.sms = c.SMs()
	s.mma2OK = true
	for _, n := range []string{"qgemm_mma2", "qgemm_mma2_s", "qgemm_grouped_mma2"} {
		if err := c.SetMaxDynamicShared(s.f[n], MaxMMA2Shared); err != nil {
			s.mma2OK = false // a GPU with less shared memory keeps qgemm_mma
		}
	}
	s.MMA2 = s.mma2OK && os.Getenv("NVMAI_GPU_MMA2") != "0"
	s.attnTiledOK = true
	for _, n := range []string{"attn_scores_t", "attn_scores_t_q8", "attn_scores_t_bf16"} {
		if err := c.SetMaxDynamicShared(s.f[n], MaxAttnTiledShared); err != nil {
			s.attnTiledOK = false
		}
	}
	s.AttnTiled = s.attnTiledOK && os.Getenv("NVMAI_GPU_ATTN_TILED") != "0"
	s.NormFold = os.Getenv("NVMAI_GPU_NORMFOLD") == "1"
	if v := os.Getenv("NVMAI_GPU_CARVEOUT"); v != "" {
		pct, err := strconv.Atoi(v)
		if err != nil || pct < 0 || pct > 100 {
			return nil, fmt.Errorf("gpukernels: NVMAI_GPU_CARVEOUT=%q: want a percentage from 0 to 100", v)
		}
		if err := s.SetCarveout(c, pct); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// UniformCarveout is the shared-memory carve-out (percent) the bench's
// "carve" variant gives every kernel, so consecutive kernels never need the
// SM to reconfigure L1 and shared memory between them. Measured on the
// H200 it was 2% slower than the driver's own choice (3.52 against 3.45 ms
// a decode step), so the default leaves the choice to the driver;
// NVMAI_GPU_CARVEOUT=N sets N% for every kernel.
const UniformCarveout = 100

// SetCarveout sets every kernel's preferred carve-out (−1: the driver's
// choice); later launches and graph captures use it.
func (s *Set) SetCarveout(c *cuda.Ctx, percent int) error {
	for _, f := range s.f {
		if err := c.SetCarveout(f, percent); err != nil {
			return err
		}
	}
	return nil
}

// Launch counts kernels, so the engine can report kernels per token.
type Launcher struct {
	C     *cuda.Ctx
	K     *Set
	Count int
	After func(kernel string) // when set, called after each launch (profiling)
	// MMA runs multi-token Q4/Q8 products on the integer tensor cores
	// (qgemm_mma, qgemm_grouped_mma; sm_80 and newer): bitwise the same.
	// With Set.MMA2 they run tiled (qgemm_mma2, qgemm_grouped_mma2), and
	// multi-token float products as fgemm_tiled instead of fgemv, unless
	// OldMMA is set.
	MMA    bool
	OldMMA bool
	// denseTile forces qgemm_mma2's block (tests): 0 picks by the grid,
	// 1 the 64×64 blocks, 2 the 64×32 ones (qgemm_mma2_s).
	denseTile int
	// GDNPipe runs the delta rule as gdn_rec_pipe (two dependency chains a
	// token instead of two in a row): bitwise gdn_rec.
	GDNPipe bool
	// GDNPar runs it as gdn_rec_par (the update over four warps) where the
	// geometry fits, else as gdn_rec_pipe: bitwise gdn_rec.
	GDNPar bool
	// GDNReg runs it as gdn_rec_reg (the state in registers, the sums
	// handed down the warps) where GDNPar would run gdn_rec_par: bitwise
	// gdn_rec.
	GDNReg bool
	// reads is the weight bytes of the launch being made (set by the
	// launchers that take a Mat), last those of the launch just made.
	reads, last int64
}

// LastReads is the weight bytes the launch just made reads, for an After
// hook (the bench's decode profile): each matrix's data, scales and
// biases over the rows it multiplies (Mat.ReadBytes: a gathered product's
// slots experts, exact for one token), one table row a token for embed,
// every expert for a grouped product (an upper bound); 0 for a launch
// that takes no weights.
func (l *Launcher) LastReads() int64 { return l.last }

func (l *Launcher) launch(name string, grid, block cuda.Dim3, smem int, args ...any) error {
	l.Count++
	l.last, l.reads = l.reads, 0
	if err := l.C.Launch(l.K.f[name], grid, block, smem, args...); err != nil {
		return err
	}
	if l.After != nil {
		l.After(name)
	}
	return nil
}

func blocks(n, per int) int { return (n + per - 1) / per }

// Mat is a weight matrix in device memory, as kernels.Matrix lays it out.
type Mat struct {
	Rows, Cols     int
	Enc            kernels.Encoding
	Data           cuda.DevicePtr
	Scales, Biases cuda.DevicePtr // Q4/Q8 only
	// Experts: EData and EScale are the byte strides from one expert's
	// matrix to the next (0 for an ordinary matrix).
	EData, EScale int64
}

// RowBytes is one row's bytes in device memory: its values, and for Q4/Q8
// a bfloat16 scale and bias a group of 64 (kernels.Matrix's layout).
func (m *Mat) RowBytes() int64 {
	switch m.Enc {
	case kernels.Q4:
		return int64(m.Cols/2 + m.Cols/kernels.GroupSize*4)
	case kernels.Q8:
		return int64(m.Cols + m.Cols/kernels.GroupSize*4)
	case kernels.F32:
		return 4 * int64(m.Cols)
	}
	return 2 * int64(m.Cols)
}

// ReadBytes is the bytes a product reads of m: every row of experts of its
// matrices (1 for an ordinary matrix, the picks of a gathered one).
func (m *Mat) ReadBytes(experts int) int64 {
	return int64(max(experts, 1)) * int64(m.Rows) * m.RowBytes()
}

// Quantized reports whether m takes the int8-activation path.
func (m *Mat) Quantized() bool { return m.Enc == kernels.Q4 || m.Enc == kernels.Q8 }

// QAct is device scratch for activations quantized per group of 64.
type QAct struct {
	Q8     cuda.DevicePtr // int8 [vectors·cols]
	Q4     cuda.DevicePtr // int32 [vectors·groups·16]
	DX, SX cuda.DevicePtr // float [vectors·groups]
}

// QActBytes is the scratch one QAct needs for vectors of cols values.
func QActBytes(vectors, cols int) (q8, q4, ds int64) {
	g := int64(vectors) * int64(cols/kernels.GroupSize)
	return g * 64, g * 64, g * 4
}

// Embed writes rows tokens[0..T) of table into out [T, cols].
func (l *Launcher) Embed(out cuda.DevicePtr, table *Mat, tokens cuda.DevicePtr, T int) error {
	l.reads = int64(T) * table.RowBytes()
	return l.launch("embed", cuda.D2(blocks(table.Cols, 256), T), cuda.D1(256), 0,
		out, table.Data, table.Scales, table.Biases, int(table.Enc), table.Cols, tokens)
}

// RMSNorm normalises rows of n.
func (l *Launcher) RMSNorm(out, x, scale cuda.DevicePtr, n, rows int, eps float32) error {
	return l.launch("rmsnorm", cuda.D1(rows), cuda.D1(256), 0, out, x, scale, n, eps)
}

// Add does x += y over n values.
func (l *Launcher) Add(x, y cuda.DevicePtr, n int) error {
	return l.launch("add", cuda.D1(blocks(n, 256)), cuda.D1(256), 0, x, y, n)
}

// SwiGLU does g = silu(g)·u over n values.
func (l *Launcher) SwiGLU(g, u cuda.DevicePtr, n int) error {
	return l.launch("swiglu", cuda.D1(blocks(n, 256)), cuda.D1(256), 0, g, u, n)
}

// SwiGLUQuantize does g = silu(g)·u over vectors·cols values and quantizes
// the result into q.
func (l *Launcher) SwiGLUQuantize(q *QAct, g, u cuda.DevicePtr, vectors, cols int) error {
	if cols%kernels.GroupSize != 0 {
		return fmt.Errorf("gpukernels: swiglu: %d columns are not a multiple of %d", cols, kernels.GroupSize)
	}
	n := vectors * cols / kernels.GroupSize
	return l.launch("swiglu_q", cuda.D1(blocks(n, 8)), cuda.D1(256), 0, g, u, n, q.Q8, q.Q4, q.DX, q.SX)
}

// RMSNormQuantize is RMSNorm of rows of n, the result also quantized into q.
func (l *Launcher) RMSNormQuantize(q *QAct, out, x, scale cuda.DevicePtr, n, rows int, eps float32) error {
	if n%kernels.GroupSize != 0 {
		return fmt.Errorf("gpukernels: rmsnorm: %d columns are not a multiple of %d", n, kernels.GroupSize)
	}
	// A warp per group of 64 (up to 32): the quantization is one pass.
	return l.launch("rmsnorm_q", cuda.D1(rows), cuda.D1(normThreads(n)), 0, out, x, scale, n, eps, q.Q8, q.Q4, q.DX, q.SX)
}

// Quantize quantizes vectors·cols values of x into q.
func (l *Launcher) Quantize(q *QAct, x cuda.DevicePtr, vectors, cols int) error {
	if cols%kernels.GroupSize != 0 {
		return fmt.Errorf("gpukernels: quantize: %d columns are not a multiple of %d", cols, kernels.GroupSize)
	}
	g := vectors * cols / kernels.GroupSize
	return l.launch("quantize", cuda.D1(blocks(g, 8)), cuda.D1(256), 0, x, g, q.Q8, q.Q4, q.DX, q.SX)
}

// GEMV computes y [T, slots·rows] = W·x for T tokens. For quantized W, q
// must hold x quantized (Quantize); for float W, x is read. sel (may be 0)
// picks experts per (token, slot); xslot says each slot has its own input
// row. res (may be 0) is added to the result.
func (l *Launcher) GEMV(y cuda.DevicePtr, m *Mat, x cuda.DevicePtr, q *QAct, res, sel cuda.DevicePtr, slots int, xslot bool, T int) error {
	xs := 0
	if xslot {
		xs = 1
	}
	rows := m.Rows * slots
	l.reads = m.ReadBytes(slots)
	switch m.Enc {
	case kernels.Q4, kernels.Q8:
		bits := 4
		if m.Enc == kernels.Q8 {
			bits = 8
		}
		if T == 1 || sel != 0 { // decode, or each token picks its own experts
			lanes := 16
			if m.Cols/kernels.GroupSize <= 8 {
				lanes = 8
			}
			return l.launch("qgemv", cuda.D2(T, blocks(rows, 256/lanes)), cuda.D1(256), 0,
				y, m.Data, m.Scales, m.Biases, m.Rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, res, sel, slots, uint64(m.EData), uint64(m.EScale), xs, lanes)
		}
		if l.MMA && l.mma2(m.Cols, 0, bits) {
			name, tokens, threads := "qgemm_mma2", mma2DenseTokens, mma2Threads
			if small := blocks(T, tokens)*blocks(rows, mma2DenseRows) < 2*l.K.sms; l.denseTile == 2 || small && l.denseTile == 0 { // half the token tile, twice the blocks
				name, tokens, threads = "qgemm_mma2_s", mma2DenseTokens/2, mma2Threads/2
			}
			smem := mma2Shared(mma2DenseRows, tokens, bits, m.Cols/kernels.GroupSize)
			return l.launch(name, cuda.D2(blocks(T, tokens), blocks(rows, mma2DenseRows)), cuda.D1(threads), smem,
				y, m.Data, m.Scales, m.Biases, rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, res, T)
		}
		if l.MMA {
			return l.launch("qgemm_mma", cuda.D2(blocks(T, 32), blocks(rows, 16)), cuda.D1(128), 0,
				y, m.Data, m.Scales, m.Biases, rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, res, T)
		}
		return l.launch("qgemv_tb", cuda.D2(blocks(T, qTokenBlock), blocks(rows, 16)), cuda.D1(256), 0,
			y, m.Data, m.Scales, m.Biases, m.Rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, res, sel, slots, uint64(m.EData), uint64(m.EScale), xs, T, qTokenBlock)
	case kernels.F32, kernels.BF16, kernels.F16:
		if T > 1 && sel == 0 && slots == 1 && l.K.MMA2 && !l.OldMMA {
			return l.launch("fgemm_tiled", cuda.D2(blocks(T, 32), blocks(m.Rows, 32)), cuda.D1(128), 0,
				y, m.Data, int(m.Enc), m.Rows, m.Cols, x, res, T)
		}
		return l.launch("fgemv", cuda.D2(T, blocks(rows, 32)), cuda.D1(256), 0,
			y, m.Data, int(m.Enc), m.Rows, m.Cols, x, res, sel, slots, uint64(m.EData), xs)
	}
	return fmt.Errorf("gpukernels: GEMV: unknown encoding %d", m.Enc)
}

// Seg is one product of an MGEMV launch: y = W·x (W a matrix, or Slots
// experts picked by Sel), plus Res when set. Token t's row r is written at
// y[t·YTok + r]; YTok 0 means Rows·Slots.
type Seg struct {
	Y        cuda.DevicePtr
	M        *Mat
	Res, Sel cuda.DevicePtr
	Slots    int
	YTok     int
}

// MaxSegs is how many products one MGEMV launch takes (kernels.cu's MSEG).
const MaxSegs = 8

// floatRowsPerBlock is kernels.cu's FROWS: the float rows an mgemv block
// stages and sums.
const floatRowsPerBlock = 8

// gemvLanes is the threads a row of m takes: 16 for Q4/Q8 rows of more
// than 8 groups, else 8 (qrow, frow_fold).
func gemvLanes(m *Mat) int {
	if m.Quantized() && m.Cols/kernels.GroupSize > 8 {
		return 16
	}
	return 8
}

// MGEMV computes several products of one input x (T tokens) in one launch:
// the quantized segments read q (x quantized), the float ones x. Each row
// is bitwise what GEMV gives it.
func (l *Launcher) MGEMV(segs []Seg, x cuda.DevicePtr, q *QAct, T int) error {
	table, nblocks, reads, err := msegTable("mgemv", segs, q != nil)
	if err != nil {
		return err
	}
	l.reads = reads
	var q8, q4, dx, sx cuda.DevicePtr
	if q != nil {
		q8, q4, dx, sx = q.Q8, q.Q4, q.DX, q.SX
	}
	return l.launch("mgemv", cuda.D2(T, nblocks), cuda.D1(256), 0, table, q8, q4, dx, sx, x)
}

// NormFoldMaxCols is the widest row MGEMVNorm takes (kernels.cu's NF_MAXC).
const NormFoldMaxCols = 2048

// MGEMVNorm is RMSNormQuantize(q, u, x, scale, n, T, eps) and then
// MGEMV(segs, u, q, T) in one launch (mgemv_n): each block normalizes and
// quantizes its token's row itself, and u and q are still written for the
// launches after. Bitwise the two launches. n ≤ NormFoldMaxCols.
func (l *Launcher) MGEMVNorm(segs []Seg, q *QAct, u, x, scale cuda.DevicePtr, n, T int, eps float32) error {
	if n%kernels.GroupSize != 0 || n > NormFoldMaxCols {
		return fmt.Errorf("gpukernels: mgemv_n: %d columns; want a multiple of %d up to %d", n, kernels.GroupSize, NormFoldMaxCols)
	}
	if len(segs) > 0 && segs[0].M.Cols != n {
		return fmt.Errorf("gpukernels: mgemv_n: products of %d columns over rows of %d", segs[0].M.Cols, n)
	}
	table, nblocks, reads, err := msegTable("mgemv_n", segs, true)
	if err != nil {
		return err
	}
	l.reads = reads
	return l.launch("mgemv_n", cuda.D2(T, nblocks), cuda.D1(256), 0, table, x, scale, eps, normThreads(n), u, q.Q8, q.Q4, q.DX, q.SX)
}

// normThreads is rmsnorm_q's block for rows of n: a warp per group of 64,
// 256 to 1024 threads (mgemv_n sums the squares in that block's order).
func normThreads(n int) int { return min(1024, max(256, n/kernels.GroupSize*32)) }

// msegTable lays out kernels.cu's MSegs for segs: the table, the launch's
// blocks and the weight bytes it reads.
func msegTable(kernel string, segs []Seg, quantized bool) (table []byte, nblocks int, reads int64, err error) {
	if len(segs) == 0 || len(segs) > MaxSegs {
		return nil, 0, 0, fmt.Errorf("gpukernels: %s takes 1 to %d products, not %d", kernel, MaxSegs, len(segs))
	}
	const fields = 16
	table = make([]byte, 8*(fields*MaxSegs+1))
	put := func(i int, v uint64) { binary.LittleEndian.PutUint64(table[8*i:], v) }
	for j, sg := range segs {
		m := sg.M
		slots := max(sg.Slots, 1)
		reads += m.ReadBytes(slots)
		if m.Cols != segs[0].M.Cols {
			return nil, 0, 0, fmt.Errorf("gpukernels: %s: product %d has %d columns, product 0 %d", kernel, j, m.Cols, segs[0].M.Cols)
		}
		if m.Quantized() && !quantized {
			return nil, 0, 0, fmt.Errorf("gpukernels: %s: product %d is quantized but no quantized input was given", kernel, j)
		}
		ytok := sg.YTok
		if ytok == 0 {
			ytok = m.Rows * slots
		}
		lanes := gemvLanes(m)
		f := j * fields
		for k, v := range []uint64{uint64(sg.Y), uint64(m.Data), uint64(m.Scales), uint64(m.Biases), uint64(sg.Res), uint64(sg.Sel),
			uint64(m.EData), uint64(m.EScale), uint64(m.Rows), uint64(m.Cols), uint64(m.Enc), uint64(slots), uint64(lanes),
			uint64(nblocks), uint64(ytok), 0} {
			put(f+k, v)
		}
		rpb := 256 / lanes
		if !m.Quantized() {
			rpb = floatRowsPerBlock
		}
		nblocks += blocks(m.Rows*slots, rpb)
	}
	put(fields*MaxSegs, uint64(len(segs)))
	return table, nblocks, reads, nil
}

// MoEDown adds to x [T, H] the MoE block's output: the routed experts' down
// products (ed gathered by sel [T, k], inputs vectors t·(k+1)+s of q), the
// shared expert's (sd, input vector t·(k+1)+k) and their combination with
// weight [T, k] and the shared gate's logit gate[t·gstride], bitwise the
// GEMVs and Combine it replaces.
func (l *Launcher) MoEDown(x cuda.DevicePtr, ed, sd *Mat, q *QAct, sel, weight, gate cuda.DevicePtr, k, gstride, T int) error {
	if !ed.Quantized() || ed.Enc != sd.Enc || ed.Rows != sd.Rows || ed.Cols != sd.Cols {
		return fmt.Errorf("gpukernels: moe_down needs routed and shared down products of one quantized shape")
	}
	if k+1 > 1024 {
		return fmt.Errorf("gpukernels: moe_down: top-%d is past the kernel's 1023", k)
	}
	lanes := gemvLanes(ed)
	R := max(1, (256/lanes)/(k+1))
	bits := 4
	if ed.Enc == kernels.Q8 {
		bits = 8
	}
	l.reads = ed.ReadBytes(k) + sd.ReadBytes(1)
	return l.launch("moe_down", cuda.D2(T, blocks(ed.Rows, R)), cuda.D1(256), 0,
		x, ed.Data, ed.Scales, ed.Biases, uint64(ed.EData), uint64(ed.EScale), sd.Data, sd.Scales, sd.Biases, ed.Rows, ed.Cols, bits,
		q.Q8, q.Q4, q.DX, q.SX, sel, weight, gate, k, gstride, lanes, R)
}

// MoEGroup lists the n = T·k entries of sel by expert (E experts): offs
// [E+1] and list [n] (moe_group with Set.MMA2, else moe_group_seq).
func (l *Launcher) MoEGroup(offs, list, sel cuda.DevicePtr, n, E int) error {
	if E > 1024 {
		return fmt.Errorf("gpukernels: moe_group: %d experts is past the kernel's 1024", E)
	}
	if !l.K.MMA2 { // the one-block expert-by-expert scan of earlier sessions
		return l.launch("moe_group_seq", cuda.D1(1), cuda.D1(256), 0, offs, list, sel, n, E)
	}
	return l.launch("moe_group", cuda.D1(1), cuda.D1(1024), 0, offs, list, sel, n, E)
}

// GEMVGrouped is the gathered product of m's E experts over a chunk grouped
// by MoEGroup: entry t·k+s writes row block t·k+s of y, reading input
// vector t·k+s (xslot) or t of q. Bitwise GEMV with sel.
func (l *Launcher) GEMVGrouped(y cuda.DevicePtr, m *Mat, q *QAct, offs, list cuda.DevicePtr, k, E int, xslot bool) error {
	if !m.Quantized() {
		return fmt.Errorf("gpukernels: qgemv_grouped needs Q4/Q8 experts")
	}
	bits := 4
	if m.Enc == kernels.Q8 {
		bits = 8
	}
	xs := 0
	if xslot {
		xs = 1
	}
	l.reads = m.ReadBytes(E)
	if l.MMA && l.mma2(m.Cols, E, bits) {
		smem := mma2Shared(mma2GroupRows, mma2GroupEntries, bits, m.Cols/kernels.GroupSize)
		return l.launch("qgemm_grouped_mma2", cuda.D1(mma2GroupedGrid(l.K.sms)), cuda.D1(mma2Threads), smem,
			y, m.Data, m.Scales, m.Biases, m.Rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, offs, list, k, uint64(m.EData), uint64(m.EScale), xs, E)
	}
	if l.MMA {
		return l.launch("qgemm_grouped_mma", cuda.D2(E, blocks(m.Rows, 16)), cuda.D1(128), 0,
			y, m.Data, m.Scales, m.Biases, m.Rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, offs, list, k, uint64(m.EData), uint64(m.EScale), xs)
	}
	return l.launch("qgemv_grouped", cuda.D2(E, blocks(m.Rows, 16)), cuda.D1(256), 0,
		y, m.Data, m.Scales, m.Biases, m.Rows, m.Cols, bits, q.Q8, q.Q4, q.DX, q.SX, offs, list, k, uint64(m.EData), uint64(m.EScale), xs)
}

// The tiled tensor-core products' geometry (kernels.cu's M2_*, M2D_*,
// M2G_*): 8 warps a block; dense blocks of 64 rows × 64 tokens (or 4
// warps, 64 × 32: qgemm_mma2_s, where the first would give fewer than two
// blocks a multiprocessor), grouped ones of 128 rows × 32 entries;
// M2_STAGES groups in flight.
const (
	mma2Threads      = 256
	mma2Stages       = 4
	mma2DenseRows    = 64
	mma2DenseTokens  = 64
	mma2GroupRows    = 128
	mma2GroupEntries = 32
	mma2MaxGroups    = 1024
	mma2MaxExperts   = 1024
	// MaxMMA2Shared is the dynamic shared memory the tiled kernels may
	// take: under the 99 KiB a block of every sm_8x and sm_90 GPU has,
	// beside the kernels' ~7 KiB of static shared memory.
	MaxMMA2Shared = 90 << 10
)

// mma2Shared is the dynamic shared memory of a tiled block of bm rows ×
// bn tokens (kernels.cu's m2_stage_bytes and the scales after the stages).
func mma2Shared(bm, bn, bits, groups int) int {
	return mma2Stages*(bm*bits*8+bn*72) + 4*bm*groups
}

// mma2GroupedGrid is qgemm_grouped_mma2's grid: two blocks a
// multiprocessor, which walk the tile list together (each block first
// scans the experts' tile counts, so the grid stays about one wave).
func mma2GroupedGrid(sms int) int { return 2 * max(sms, 1) }

// mma2 reports whether the tiled kernels take a product of cols columns
// of bits-bit weights (over E experts when E > 0).
func (l *Launcher) mma2(cols, E, bits int) bool {
	if !l.K.MMA2 || l.OldMMA {
		return false
	}
	g := cols / kernels.GroupSize
	if g > mma2MaxGroups || E > mma2MaxExperts {
		return false
	}
	bm, bn := mma2DenseRows, mma2DenseTokens
	if E > 0 {
		bm, bn = mma2GroupRows, mma2GroupEntries
	}
	return mma2Shared(bm, bn, bits, g) <= MaxMMA2Shared
}

// convTokens is kernels.cu's CONV_TB: the tokens one gdn_conv thread
// takes (at least the 7 state rows of the widest conv, 8 taps).
const convTokens = 16

// GDNConv runs the causal conv + SiLU over T tokens (gdn_conv's tokens in
// parallel with Set.MMA2, else gdn_conv_seq).
func (l *Launcher) GDNConv(out, proj, state, w cuda.DevicePtr, C, K, T int) error {
	if K > 8 {
		return fmt.Errorf("gpukernels: conv kernel %d is wider than 8", K)
	}
	if !l.K.MMA2 { // a thread walking all T tokens, validated before session 17
		return l.launch("gdn_conv_seq", cuda.D1(blocks(C, 128)), cuda.D1(128), 0, out, proj, state, w, C, K, T)
	}
	return l.launch("gdn_conv", cuda.D2(blocks(C, 128), blocks(T, convTokens)), cuda.D1(128), 0, out, proj, state, w, C, K, T)
}

// GDNShape is the Gated DeltaNet geometry.
type GDNShape struct{ C, Hk, Hv, Dk, Dv int }

// GDNHeads runs the delta rule and gated norm for every value head; token
// t's gate inputs are a[t·abStride+h] and b[t·abStride+h].
func (l *Launcher) GDNHeads(o, S, conv, z, a, b, negExpA, dtBias, normW cuda.DevicePtr, s GDNShape, eps float32, T, abStride int) error {
	threads := max(96, (s.Dv+31)/32*32)
	smem := (2*s.Dk + s.Dv + s.Dk*s.Dv) * 4
	if smem > MaxGDNShared {
		return fmt.Errorf("gpukernels: a %d×%d delta-rule state (%d bytes) is past the %d bytes of shared memory the kernel asks for", s.Dk, s.Dv, smem, MaxGDNShared)
	}
	return l.launch("gdn_heads", cuda.D1(s.Hv), cuda.D1(threads), smem,
		o, S, conv, z, a, b, negExpA, dtBias, normW, s.C, s.Hk, s.Hv, s.Dk, s.Dv, eps, T, abStride)
}

// GDNRecShared is the shared memory gdn_rec takes for T tokens (kernels.cu's
// GDN_STAGE_T is 8).
func GDNRecShared(s GDNShape, T int) int {
	n := 32*s.Dk + 3*s.Dk + 4*T // gdn_rec_pipe's k is double-buffered
	if T <= 8 {
		n += T * 2 * s.Dk
	}
	return n * 4
}

// GDNRecParShared is the shared memory gdn_rec_par takes for T tokens:
// gdn_rec_pipe's plus the two sums' terms [2][Dk][32] and a p per column.
func GDNRecParShared(s GDNShape, T int) int {
	return GDNRecShared(s, T) + (64*s.Dk+32)*4
}

// GDNParFits reports whether gdn_rec_par can take the geometry for chunks
// of T tokens (its four warps cover 128 rows; MaxGDNShared is opted in).
func GDNParFits(s GDNShape, T int) bool {
	return GDNSplitFits(s, T) && GDNRecParShared(s, T) <= MaxGDNShared && GDNRecParShared(s, 8) <= MaxGDNShared
}

// GDNRecRegShared is the shared memory gdn_rec_reg takes for T tokens: the
// per-token scalars (and q, k staged for the norms when T ≤ 8), each warp's
// rows of q and k [4][96], the hand-offs' partial sums [2][4][32] and the
// deltas [32].
func GDNRecRegShared(s GDNShape, T int) int {
	n := 4*T + 4*96 + 2*4*32 + 32
	if T <= 8 {
		n += T * 2 * s.Dk
	}
	return n * 4
}

// GDNRegFits reports whether gdn_rec_reg can take the geometry for chunks
// of T tokens (a warp of 32 rows for each 32 of Dk, at most four).
func GDNRegFits(s GDNShape, T int) bool {
	return GDNSplitFits(s, T) && GDNRecRegShared(s, T) <= MaxGDNShared && GDNRecRegShared(s, 8) <= MaxGDNShared
}

// maxStaticShared is what a kernel may take without raising its limit.
const maxStaticShared = 48 << 10

// GDNSplitFits reports whether gdn_rec can take the geometry for chunks of
// T tokens.
func GDNSplitFits(s GDNShape, T int) bool {
	return s.Dk%32 == 0 && s.Dk <= 128 && GDNRecShared(s, T) <= maxStaticShared && GDNRecShared(s, 8) <= maxStaticShared
}

// GDNRec runs the delta rule for every head, 32 value columns a block,
// writing the raw outputs to oraw [T, Hv·Dv] (gdn_rec).
func (l *Launcher) GDNRec(oraw, S, conv, a, b, negExpA, dtBias cuda.DevicePtr, s GDNShape, T, abStride int) error {
	if !GDNSplitFits(s, T) {
		return fmt.Errorf("gpukernels: gdn_rec: a %d-deep state slice over %d tokens is past %d bytes of shared memory", s.Dk, T, maxStaticShared)
	}
	name, smem := "gdn_rec", GDNRecShared(s, T)
	switch {
	case l.GDNPar && l.GDNReg && GDNRegFits(s, T):
		name, smem = "gdn_rec_reg", GDNRecRegShared(s, T)
	case l.GDNPar && GDNParFits(s, T):
		name, smem = "gdn_rec_par", GDNRecParShared(s, T)
	case l.GDNPipe || l.GDNPar:
		name = "gdn_rec_pipe"
	}
	return l.launch(name, cuda.D2(s.Hv, blocks(s.Dv, 32)), cuda.D1(128), smem,
		oraw, S, conv, a, b, negExpA, dtBias, s.C, s.Hk, s.Hv, s.Dk, s.Dv, T, abStride)
}

// MaxRows is the most sequences a *Rows launch takes (kernels.cu's
// ROWS_MAX): the batched decode step's rows.
const MaxRows = 16

// rowPtrs is kernels.cu's RowPtrs, passed by value: a pointer a row.
func rowPtrs(ptrs []cuda.DevicePtr) ([]byte, error) {
	if len(ptrs) == 0 || len(ptrs) > MaxRows {
		return nil, fmt.Errorf("gpukernels: %d rows; a batched launch takes 1 to %d", len(ptrs), MaxRows)
	}
	table := make([]byte, 8*MaxRows)
	for i, p := range ptrs {
		binary.LittleEndian.PutUint64(table[8*i:], uint64(p))
	}
	return table, nil
}

// GDNConvRows is GDNConv with T = 1 for each of len(states) sequences in
// one launch: row r of proj [N, C] through states[r] into row r of out,
// bitwise GDNConv(…, T = 1) on each row.
func (l *Launcher) GDNConvRows(out, proj cuda.DevicePtr, states []cuda.DevicePtr, w cuda.DevicePtr, C, K int) error {
	if K > 8 {
		return fmt.Errorf("gpukernels: conv kernel %d is wider than 8", K)
	}
	table, err := rowPtrs(states)
	if err != nil {
		return err
	}
	return l.launch("gdn_conv_rows", cuda.Dim3{X: uint32(blocks(C, 128)), Y: 1, Z: uint32(len(states))}, cuda.D1(128), 0, out, proj, table, w, C, K)
}

// GDNRecRows is GDNRec with T = 1 for each of len(states) sequences in one
// launch (row r: oraw [N, Hv·Dv], conv [N, C], a and b rows abStride apart,
// state states[r]), bitwise GDNRec(…, T = 1) on each row. It runs only
// where that GDNRec runs gdn_rec_reg; ok false: launch GDNRec row by row.
func (l *Launcher) GDNRecRows(oraw cuda.DevicePtr, states []cuda.DevicePtr, conv, a, b, negExpA, dtBias cuda.DevicePtr, s GDNShape, abStride int) (ok bool, err error) {
	if !(l.GDNPar && l.GDNReg && GDNRegFits(s, 1)) {
		return false, nil
	}
	table, err := rowPtrs(states)
	if err != nil {
		return false, err
	}
	grid := cuda.Dim3{X: uint32(s.Hv), Y: uint32(blocks(s.Dv, 32)), Z: uint32(len(states))}
	return true, l.launch("gdn_rec_reg_rows", grid, cuda.D1(128), GDNRecRegShared(s, 1),
		oraw, table, conv, a, b, negExpA, dtBias, s.C, s.Hk, s.Hv, s.Dk, s.Dv, abStride)
}

// GDNNorm applies the gated RMSNorm to gdn_rec's outputs, into o [T, Hv·Dv];
// with q (heads of whole groups of 64 only) it also quantizes o.
func (l *Launcher) GDNNorm(o, oraw, z, normW cuda.DevicePtr, s GDNShape, eps float32, T int, q *QAct) error {
	var q8, q4, dx, sx cuda.DevicePtr
	if q != nil {
		if s.Dv%kernels.GroupSize != 0 {
			return fmt.Errorf("gpukernels: gdn_norm: heads of %d values are not whole groups of %d", s.Dv, kernels.GroupSize)
		}
		q8, q4, dx, sx = q.Q8, q.Q4, q.DX, q.SX
	}
	threads := min(1024, max(64, (s.Dv+31)/32*32))
	return l.launch("gdn_norm", cuda.D2(s.Hv, T), cuda.D1(threads), 4*s.Dv, o, oraw, z, normW, s.Hv, s.Dv, eps, q8, q4, dx, sx)
}

// AttnShape is the full-attention geometry.
type AttnShape struct{ Hq, Hkv, Dh, Half int }

// KVCache is one attention layer's K and V rows in device memory, a row of
// Hkv·Dh values per token, at one of the CPU engine's widths
// (blocks.KVCache, docs/kv-cache.md): float32, bfloat16, or int8 with
// the scales of each row (one float32 per KVGroup(Dh) values) in KS and VS.
type KVCache struct {
	Bits   int            // model.KVFloat32, KVBF16 or KVInt8
	K, V   cuda.DevicePtr // [capacity, Hkv·Dh] values
	KS, VS cuda.DevicePtr // int8: [capacity, Hkv·Dh/KVGroup(Dh)] scales
}

// KVGroup is the int8 cache's scale group for heads of dh values, the CPU
// engine's (blocks.KVGroup).
func KVGroup(dh int) int { return kvblocks.KVGroup(dh) }

// KVRowBytes is the bytes one token's K (or V) row of kvd values (heads of
// dh) takes at bits: its values, and its scales for int8.
func KVRowBytes(bits, kvd, dh int) (values, scales int64) {
	switch bits {
	case model.KVBF16:
		return 2 * int64(kvd), 0
	case model.KVInt8:
		return int64(kvd), 4 * int64(kvd/KVGroup(dh))
	}
	return 4 * int64(kvd), 0
}

// AttnKV writes the chunk's keys (normed, rotated) and values at *pos… in
// the cache's width: rounded to bfloat16 or quantized per group as the CPU
// engine's kernels.ToBF16 and kernels.QuantizeQ8 do, bit for bit.
func (l *Launcher) AttnKV(kv KVCache, k, v, kNorm, invFreq, pos cuda.DevicePtr, s AttnShape, eps float32, T int) error {
	grid, block := cuda.D2(s.Hkv, T), cuda.D1(128)
	switch kv.Bits {
	case model.KVFloat32:
		return l.launch("attn_kv", grid, block, 0, kv.K, kv.V, k, v, kNorm, invFreq, pos, s.Hkv, s.Dh, s.Half, eps, T)
	case model.KVBF16:
		return l.launch("attn_kv_bf16", grid, block, 4*s.Dh, kv.K, kv.V, k, v, kNorm, invFreq, pos, s.Hkv, s.Dh, s.Half, eps, T)
	case model.KVInt8:
		return l.launch("attn_kv_q8", grid, block, 4*s.Dh, kv.K, kv.V, kv.KS, kv.VS, k, v, kNorm, invFreq, pos, s.Hkv, s.Dh, s.Half, eps, KVGroup(s.Dh), T)
	}
	return fmt.Errorf("gpukernels: attn_kv: a KV cache of %d bits; want 8, 16 or 32", kv.Bits)
}

// AttnHeads computes the gated attention output of every query head: the
// scores in attnSlices slices of positions, then the softmax and values in
// slices of 64 head dims. A cache below float32 is widened value by value
// as kernels.widenQ8 / widenBF16 widen it, so the output is bitwise what
// the float32 kernels give over the widened rows.
func (l *Launcher) AttnHeads(o, scores, q2 cuda.DevicePtr, kv KVCache, qNorm, invFreq, pos cuda.DevicePtr, s AttnShape, eps float32, capacity, T int) error {
	if T > 1 && l.K.AttnTiled && attnTiledFits(s) {
		return l.attnHeadsTiled(o, scores, q2, kv, qNorm, invFreq, pos, s, eps, capacity, T)
	}
	sGrid, sBlock := cuda.Dim3{X: uint32(s.Hq), Y: uint32(T), Z: attnSlices}, cuda.D1(256)
	vGrid, vBlock := cuda.Dim3{X: uint32(s.Hq), Y: uint32(T), Z: uint32(blocks(s.Dh, 64))}, cuda.D1(64)
	var err error
	switch kv.Bits {
	case model.KVFloat32:
		if err = l.launch("attn_scores", sGrid, sBlock, s.Dh*4, scores, q2, kv.K, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, capacity); err == nil {
			err = l.launch("attn_values", vGrid, vBlock, 0, o, scores, q2, kv.V, pos, s.Hq, s.Hkv, s.Dh, capacity)
		}
	case model.KVBF16:
		if err = l.launch("attn_scores_bf16", sGrid, sBlock, s.Dh*4, scores, q2, kv.K, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, capacity); err == nil {
			err = l.launch("attn_values_bf16", vGrid, vBlock, 0, o, scores, q2, kv.V, pos, s.Hq, s.Hkv, s.Dh, capacity)
		}
	case model.KVInt8:
		g := KVGroup(s.Dh)
		if err = l.launch("attn_scores_q8", sGrid, sBlock, s.Dh*4, scores, q2, kv.K, kv.KS, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, capacity, g); err == nil {
			err = l.launch("attn_values_q8", vGrid, vBlock, 0, o, scores, q2, kv.V, kv.VS, pos, s.Hq, s.Hkv, s.Dh, capacity, g)
		}
	default:
		err = fmt.Errorf("gpukernels: attention over a KV cache of %d bits; want 8, 16 or 32", kv.Bits)
	}
	return err
}

// attnTiledFits reports whether the tiled kernels take the geometry: the
// scores tile within MaxAttnTiledShared, whole KV groups.
func attnTiledFits(s AttnShape) bool {
	return s.Hkv > 0 && s.Hq%s.Hkv == 0 && attnTiledShared(s.Dh) <= MaxAttnTiledShared
}

// attnHeadsTiled is AttnHeads for a chunk on the tiled kernels (Set.AttnTiled),
// bitwise the one-row kernels. The normed, rotated queries [T, Hq, Dh] go
// to o first (the values overwrite them last), the softmax weights over the
// scores in place.
func (l *Launcher) attnHeadsTiled(o, scores, q2 cuda.DevicePtr, kv KVCache, qNorm, invFreq, pos cuda.DevicePtr, s AttnShape, eps float32, capacity, T int) error {
	if err := l.launch("attn_qnorm", cuda.D2(s.Hq, T), cuda.D1(256), 0, o, q2, qNorm, invFreq, pos, s.Hq, s.Dh, s.Half, eps); err != nil {
		return err
	}
	rowTiles := blocks(T*(s.Hq/s.Hkv), attnTileRows)
	// Long contexts: the position tiles over more blocks, so a short chunk
	// still fills the GPU (each block reads every tile-th tile).
	z := max(1, min(8, 2*max(l.K.sms, 1)/max(s.Hkv*rowTiles, 1)))
	sGrid := cuda.Dim3{X: uint32(s.Hkv), Y: uint32(rowTiles), Z: uint32(z)}
	vGrid := cuda.Dim3{X: uint32(s.Hkv), Y: uint32(rowTiles), Z: uint32(blocks(s.Dh, 64))}
	smem := attnTiledShared(s.Dh)
	var err error
	switch kv.Bits {
	case model.KVFloat32:
		err = l.launch("attn_scores_t", sGrid, cuda.D1(256), smem, scores, o, kv.K, pos, s.Hq, s.Hkv, s.Dh, capacity, T)
	case model.KVBF16:
		err = l.launch("attn_scores_t_bf16", sGrid, cuda.D1(256), smem, scores, o, kv.K, pos, s.Hq, s.Hkv, s.Dh, capacity, T)
	case model.KVInt8:
		err = l.launch("attn_scores_t_q8", sGrid, cuda.D1(256), smem, scores, o, kv.K, kv.KS, pos, s.Hq, s.Hkv, s.Dh, capacity, KVGroup(s.Dh), T)
	default:
		err = fmt.Errorf("gpukernels: attention over a KV cache of %d bits; want 8, 16 or 32", kv.Bits)
	}
	if err != nil {
		return err
	}
	// 64 threads: attn_values' block, so the softmax sums in its order.
	if err := l.launch("attn_softmax_t", cuda.D2(s.Hq, T), cuda.D1(64), 0, scores, pos, s.Hq, capacity); err != nil {
		return err
	}
	switch kv.Bits {
	case model.KVFloat32:
		return l.launch("attn_values_t", vGrid, cuda.D1(256), 0, o, scores, q2, kv.V, pos, s.Hq, s.Hkv, s.Dh, capacity, T)
	case model.KVBF16:
		return l.launch("attn_values_t_bf16", vGrid, cuda.D1(256), 0, o, scores, q2, kv.V, pos, s.Hq, s.Hkv, s.Dh, capacity, T)
	default:
		return l.launch("attn_values_t_q8", vGrid, cuda.D1(256), 0, o, scores, q2, kv.V, kv.VS, pos, s.Hq, s.Hkv, s.Dh, capacity, KVGroup(s.Dh), T)
	}
}

// AttnRow is one sequence's side of a batched attention launch: its KV
// cache, its device position, and its score scratch over Capacity
// positions (AttnHeads' scores and capacity).
type AttnRow struct {
	KV       KVCache
	Pos      cuda.DevicePtr
	Scores   cuda.DevicePtr
	Capacity int
}

// rowInts is kernels.cu's RowInts, passed by value.
func rowInts(vals []int) []byte {
	table := make([]byte, 4*MaxRows)
	for i, v := range vals {
		binary.LittleEndian.PutUint32(table[4*i:], uint32(int32(v)))
	}
	return table
}

// attnRowsWidth is the rows' common KV width when a batched attention
// launch takes them (int8 or bfloat16, every row alike), else 0.
func attnRowsWidth(rows []AttnRow) int {
	if len(rows) == 0 || len(rows) > MaxRows {
		return 0
	}
	bits := rows[0].KV.Bits
	for _, r := range rows {
		if r.KV.Bits != bits {
			return 0
		}
	}
	if bits != model.KVInt8 && bits != model.KVBF16 {
		return 0
	}
	return bits
}

// AttnRowsFit reports whether AttnKVRows and AttnHeadsRows take rows: 1 to
// MaxRows of them, every cache int8, or every cache bfloat16 (else the
// caller launches AttnKV and AttnHeads row by row).
func AttnRowsFit(rows []AttnRow) bool { return attnRowsWidth(rows) != 0 }

// attnRowTables checks that a batched attention launch takes rows
// (AttnRowsFit) and lays out their pointers and capacities: the rows' KV
// width and the tables.
func attnRowTables(rows []AttnRow) (bits int, kc, vc, ks, vs, pos, scores, caps []byte, err error) {
	if bits = attnRowsWidth(rows); bits == 0 {
		err = fmt.Errorf("gpukernels: a batched attention launch takes 1 to %d rows whose caches are all int8 or all bfloat16", MaxRows)
		return
	}
	cols := make([][]cuda.DevicePtr, 6)
	capv := make([]int, len(rows))
	for i, r := range rows {
		for j, p := range []cuda.DevicePtr{r.KV.K, r.KV.V, r.KV.KS, r.KV.VS, r.Pos, r.Scores} {
			cols[j] = append(cols[j], p)
		}
		capv[i] = r.Capacity
	}
	tabs := make([][]byte, 6)
	for j := range cols {
		if tabs[j], err = rowPtrs(cols[j]); err != nil {
			return
		}
	}
	return bits, tabs[0], tabs[1], tabs[2], tabs[3], tabs[4], tabs[5], rowInts(capv), nil
}

// AttnKVRows is AttnKV with T = 1 for each row in one launch: row r of k
// and v [N, Hkv·Dh] into rows[r]'s cache at its position, bitwise AttnKV
// on each row alone. Only where AttnRowsFit.
func (l *Launcher) AttnKVRows(k, v, kNorm, invFreq cuda.DevicePtr, rows []AttnRow, s AttnShape, eps float32) error {
	bits, kc, vc, ks, vs, pos, _, _, err := attnRowTables(rows)
	if err != nil {
		return err
	}
	name, group := "attn_kv_q8_rows", KVGroup(s.Dh)
	if bits == model.KVBF16 {
		name, group = "attn_kv_bf16_rows", s.Dh
	}
	return l.launch(name, cuda.D2(s.Hkv, len(rows)), cuda.D1(128), 4*s.Dh, kc, vc, ks, vs, k, v, kNorm, invFreq, pos, s.Hkv, s.Dh, s.Half, eps, group)
}

// AttnHeadsRows is AttnHeads with T = 1 for each row in one launch of the
// scores and one of the values: row r of q2 [N, Hq·2·Dh] against rows[r]'s
// cache, scores and capacity, into row r of o [N, Hq·Dh], bitwise
// AttnHeads on each row alone. Only where AttnRowsFit.
func (l *Launcher) AttnHeadsRows(o, q2, qNorm, invFreq cuda.DevicePtr, rows []AttnRow, s AttnShape, eps float32) error {
	bits, kc, vc, ks, vs, pos, scores, caps, err := attnRowTables(rows)
	if err != nil {
		return err
	}
	n := len(rows)
	sGrid, sBlock := cuda.Dim3{X: uint32(s.Hq), Y: uint32(n), Z: attnSlices}, cuda.D1(256)
	vGrid, vBlock := cuda.Dim3{X: uint32(s.Hq), Y: uint32(n), Z: uint32(blocks(s.Dh, 64))}, cuda.D1(64)
	scoresName, valuesName, group := "attn_scores_q8_rows", "attn_values_q8_rows", KVGroup(s.Dh)
	if bits == model.KVBF16 {
		scoresName, valuesName, group = "attn_scores_bf16_rows", "attn_values_bf16_rows", s.Dh
	}
	if err := l.launch(scoresName, sGrid, sBlock, s.Dh*4, scores, caps, q2, kc, ks, qNorm, invFreq, pos, s.Hq, s.Hkv, s.Dh, s.Half, eps, group); err != nil {
		return err
	}
	return l.launch(valuesName, vGrid, vBlock, 0, o, scores, caps, q2, vc, vs, pos, s.Hq, s.Hkv, s.Dh, group)
}

// attnSlices is how many blocks share one head's scores.
const attnSlices = 8

// Route picks k of E experts per token from logits rows stride apart.
func (l *Launcher) Route(sel, weight, logits cuda.DevicePtr, E, k, T, stride int) error {
	if E > 1024 || k > 64 {
		return fmt.Errorf("gpukernels: route: %d experts top-%d is past the kernel's 1024/64", E, k)
	}
	return l.launch("route", cuda.D1(T), cuda.D1(256), 0, sel, weight, logits, E, k, stride, cuda.DevicePtr(0))
}

// RouteFixed is Route with the experts given (a replayed routing): token
// t's are fixed[t·k, (t+1)·k) int32, ascending and distinct, which the
// caller checks. They are copied to sel, and weight gets the router's
// softmax at them renormalised over them, as qwen35's RouteFixed does.
func (l *Launcher) RouteFixed(sel, weight, logits, fixed cuda.DevicePtr, E, k, T, stride int) error {
	if E > 1024 || k > 64 {
		return fmt.Errorf("gpukernels: route: %d experts top-%d is past the kernel's 1024/64", E, k)
	}
	if fixed == 0 {
		return fmt.Errorf("gpukernels: RouteFixed: no experts given")
	}
	return l.launch("route", cuda.D1(T), cuda.D1(256), 0, sel, weight, logits, E, k, stride, fixed)
}

// Combine adds the weighted routed outputs and the gated shared expert to x
// (token t's gate logit at gate[t·gstride]).
func (l *Launcher) Combine(x, routed, weight, shared, gate cuda.DevicePtr, k, H, T, gstride int) error {
	return l.launch("combine", cuda.D2(blocks(H, 256), T), cuda.D1(256), 0, x, routed, weight, shared, gate, k, H, gstride)
}

// Argmax writes the greedy token (−1 on NaN) to out.
func (l *Launcher) Argmax(out, logits cuda.DevicePtr, V int) error {
	return l.launch("argmax", cuda.D1(1), cuda.D1(1024), 0, out, logits, V)
}

// HeadRows is the batched step's tail in one launch: row r of logits
// [N, V] copied to dst[r], its greedy pick (Argmax's) into next[r], and
// the position at pos[r] advanced by one, for each of the N rows.
func (l *Launcher) HeadRows(logits cuda.DevicePtr, V int, dst, next, pos []cuda.DevicePtr) error {
	if len(next) != len(dst) || len(pos) != len(dst) {
		return fmt.Errorf("gpukernels: head_rows: %d logits rows, %d picks, %d positions", len(dst), len(next), len(pos))
	}
	d, err := rowPtrs(dst)
	if err != nil {
		return err
	}
	n, _ := rowPtrs(next)
	p, _ := rowPtrs(pos)
	return l.launch("head_rows", cuda.D1(len(dst)), cuda.D1(1024), 0, logits, V, d, n, p)
}

// TopKThreads is topk_cand's block size.
const TopKThreads = 1024

// TopKCand writes the top-k candidates of logits [V] to out (4 header words,
// then cap (id, logit) pairs): see kernels.cu's topk_cand, the reference is
// sample.TopKCandidates.
func (l *Launcher) TopKCand(out, logits cuda.DevicePtr, V, k, cap int) error {
	if k < 1 || k >= V || cap < 1 {
		return fmt.Errorf("gpukernels: topk_cand: k %d of %d logits (cap %d) is outside 1 ≤ k < V", k, V, cap)
	}
	return l.launch("topk_cand", cuda.D1(1), cuda.D1(TopKThreads), 0, out, logits, V, k, cap)
}

// SampBlock is kernels.cu's SAMP_BLOCK: sample.Block, the ids a blocked
// sum adds in order (a test holds the two equal).
const SampBlock = 512

// SampBlocks is how many blocks a row of V logits has.
func SampBlocks(V int) int { return blocks(V, SampBlock) }

// SampCap is kernels.cu's SAMP_CAP, the most candidates SampCand takes.
const SampCap = 1024

// PExp writes sample.Exp of x [n] (float64) to out, for the tests.
func (l *Launcher) PExp(out, x cuda.DevicePtr, n int) error {
	return l.launch("pexp_eval", cuda.D1(blocks(n, 256)), cuda.D1(256), 0, out, x, n)
}

// SampCount adds the n tokens at ids to the penalty counts [V].
func (l *Launcher) SampCount(counts, ids cuda.DevicePtr, n, V int) error {
	return l.launch("samp_count", cuda.D1(1), cuda.D1(256), 0, counts, ids, n, V)
}

// SampPenalize writes logits [V] with the counts' penalties to out.
func (l *Launcher) SampPenalize(out, logits, counts cuda.DevicePtr, V int, rep, pres, freq float64) error {
	return l.launch("samp_pen", cuda.D1(blocks(V, 256)), cuda.D1(256), 0, out, logits, counts, V, rep, pres, freq)
}

// SampRows writes every token's weight to w [V] and the block sums to bsum
// [SampBlocks(V)] (thrBits: the top-k threshold, cut: top-p's, each 0 for
// none; minP: apply min-p here); keys (or 0) gets each logit/T as an
// order-preserving uint64; status[0] becomes 1 for a row the host must
// report.
func (l *Launcher) SampRows(w, bsum, keys, status, logits, maxID, thrBits, cut cuda.DevicePtr, V int, T, logMinP float64, minP bool) error {
	return l.launch("samp_rows", cuda.D1(SampBlocks(V)), cuda.D1(SampBlock), 0,
		w, bsum, keys, status, logits, maxID, thrBits, cut, V, T, logMinP, boolInt(minP))
}

// SampNucleus writes top-p's cut (a float64) over SampRows' weights and
// keys [V] to cut.
func (l *Launcher) SampNucleus(cut, keys, w cuda.DevicePtr, V int, topP float64) error {
	return l.launch("samp_nucleus", cuda.D1(1), cuda.D1(1024), 0, cut, keys, w, V, topP)
}

// SampDraw draws from SampRows' row with the uniform u into out[0].
func (l *Launcher) SampDraw(out, w, bsum, status cuda.DevicePtr, V int, u float64) error {
	return l.launch("samp_draw", cuda.D1(1), cuda.D1(32), 0, out, w, bsum, status, V, u)
}

// SampCand finishes the step over TopKCand's list cand (every candidate of
// a top-k filter) into out[0].
func (l *Launcher) SampCand(out, cand cuda.DevicePtr, T, topP, logMinP, u float64) error {
	return l.launch("samp_cand", cuda.D1(1), cuda.D1(SampCap), 0, out, cand, T, topP, logMinP, u)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Advance adds T to the device position.
func (l *Launcher) Advance(pos cuda.DevicePtr, T int) error {
	return l.launch("advance", cuda.D1(1), cuda.D1(32), 0, pos, T)
}

// Streamed experts (kernels.cu's slot_resolve, slot_fill, expert_need,
// expert_stage, slot_prefetch, slot_fill_ahead): a layer's table is
// SlotTableWords int32 words, slotOf [E], expertOf [S], lastUse [S], the
// step counter, the fill count and the fill list [2k], the read-ahead
// count and list [2k]; its stats SlotStatsWords uint64 counters.

// MaxSlots is the most VRAM slots a streamed layer may have (SLOT_MAXS).
const MaxSlots = 1024

// SlotStatsWords is the uint64 counters of a streamed layer: decode hits,
// misses, bytes copied; prefill experts staged from VRAM, from the host,
// and the host bytes; read-ahead guesses, picks that were guessed, guesses
// copied ahead, picks found in a slot copied ahead for them, and the bytes
// copied ahead.
const SlotStatsWords = 11

// slotCopyUnroll is kernels.cu's SLOT_COPY_UNROLL.
const slotCopyUnroll = 4

// SlotTableWords is a streamed layer's table size in int32 words.
func SlotTableWords(E, S, k int) int { return E + 2*S + 3 + 4*k }

// SlotFillOffset is the word of the table where the fill count sits (the
// fill list follows it).
func SlotFillOffset(E, S int) int { return E + 2*S + 1 }

// SlotAheadOffset is the word of the table where the read-ahead count sits
// (the read-ahead list follows it).
func SlotAheadOffset(E, S, k int) int { return E + 2*S + 2 + 2*k }

// MaxSlotExperts is the most experts a layer may have for slot_prefetch
// (SLOT_MAXE).
const MaxSlotExperts = 1024

// DefaultAheadBlocks is slot_fill_ahead's grid: 32 blocks of 256 threads
// with four 16-byte loads in flight each keep 512 KiB of reads in flight,
// several times the link's bandwidth-delay product (55 GB/s × ~2 µs),
// on a quarter of an H100's SMs at an eighth of their threads.
const DefaultAheadBlocks = 32

// SlotCopyBlocks is how many blocks copy one record of stride bytes.
func SlotCopyBlocks(stride int64) int {
	return max(1, blocks(int(stride/16), 256*slotCopyUnroll))
}

func checkSlots(E, S, k int, stride int64) error {
	if k < 1 || k > 64 || S < k || S > E || S > MaxSlots || stride <= 0 || stride%16 != 0 {
		return fmt.Errorf("gpukernels: streamed experts: %d slots of %d experts top-%d (records of %d bytes) is outside top-k ≤ slots ≤ min(E, %d), k ≤ 64, records a multiple of 16 bytes", S, E, k, stride, MaxSlots)
	}
	return nil
}

// SlotResolve gives a decode step's k picks sel [k] their slots of the
// layer's table tab, writing slotSel [k] and the fill list, and counts
// into stats (slot_resolve).
func (l *Launcher) SlotResolve(slotSel, tab, stats, sel cuda.DevicePtr, E, S, k int, stride int64) error {
	if err := checkSlots(E, S, k, stride); err != nil {
		return err
	}
	return l.launch("slot_resolve", cuda.D1(1), cuda.D1(256), 0, slotSel, tab, stats, sel, E, S, k, uint64(stride))
}

// SlotFill copies the fill list's experts from host (mapped pinned memory,
// expert e at e·stride) into their slots of pool (slot_fill). skip, when
// not 0, is an int32 read when the kernel runs: nonzero copies nothing,
// the slots then holding stale bytes (a bench's step without its copies;
// see pkg/gpu's copy wait).
func (l *Launcher) SlotFill(pool, host, tab cuda.DevicePtr, E, S, k int, stride int64, skip cuda.DevicePtr) error {
	if err := checkSlots(E, S, k, stride); err != nil {
		return err
	}
	return l.launch("slot_fill", cuda.D2(k, SlotCopyBlocks(stride)), cuda.D1(256), 0, pool, host, tab, E, S, uint64(stride), skip)
}

// SlotPrefetch guesses a decode step's k experts of the layer from logits
// [E] (the router applied to the hidden state entering the layer) and
// gives them slots of tab, writing the read-ahead list (slot_prefetch).
func (l *Launcher) SlotPrefetch(tab, stats, logits cuda.DevicePtr, E, S, k int, stride int64) error {
	if err := checkSlots(E, S, k, stride); err != nil {
		return err
	}
	if E > MaxSlotExperts {
		return fmt.Errorf("gpukernels: slot_prefetch: %d experts is past the kernel's %d", E, MaxSlotExperts)
	}
	return l.launch("slot_prefetch", cuda.D1(1), cuda.D1(256), 0, tab, stats, logits, E, S, k, uint64(stride))
}

// SlotFillAhead copies the read-ahead list's experts from host into their
// slots of pool with a grid of blocks blocks (slot_fill_ahead); skip as
// SlotFill's.
func (l *Launcher) SlotFillAhead(pool, host, tab cuda.DevicePtr, E, S, k int, stride int64, blocks int, skip cuda.DevicePtr) error {
	if err := checkSlots(E, S, k, stride); err != nil {
		return err
	}
	if blocks < 1 {
		return fmt.Errorf("gpukernels: slot_fill_ahead: a grid of %d blocks", blocks)
	}
	return l.launch("slot_fill_ahead", cuda.D1(blocks), cuda.D1(256), 0, pool, host, tab, E, S, k, uint64(stride), skip)
}

// ExpertNeed marks need [E] with the experts of sel [n] (expert_need).
func (l *Launcher) ExpertNeed(need, sel cuda.DevicePtr, n, E int) error {
	return l.launch("expert_need", cuda.D1(1), cuda.D1(256), 0, need, sel, n, E)
}

// ExpertStage copies every needed expert into staging (expert e at
// e·stride), from its slot of pool when the table gives it one, else from
// host (expert_stage).
func (l *Launcher) ExpertStage(staging, pool, host, need, tab, stats cuda.DevicePtr, E int, stride int64) error {
	if stride <= 0 || stride%16 != 0 {
		return fmt.Errorf("gpukernels: expert_stage: records of %d bytes are not a multiple of 16", stride)
	}
	return l.launch("expert_stage", cuda.D2(E, SlotCopyBlocks(stride)), cuda.D1(256), 0, staging, pool, host, need, tab, stats, uint64(stride))
}
