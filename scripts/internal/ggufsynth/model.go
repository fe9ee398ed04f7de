package main

import (
	"fmt"
	"math"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// The llama.cpp side of the comparison: tensor names, shapes and metadata of
// llama.cpp's qwen35moe architecture (its converter's Qwen3_5MoeTextModel and
// loader src/models/qwen35moe.cpp, as bundled with node-llama-cpp 3.22.1 =
// llama.cpp v0.5.0), for the geometry nvmai-convert synth uses.

// init is a tensor's distribution: a constant, or U(lo, hi).
type initKind struct {
	constant bool
	lo, hi   float32
}

func constant(v float32) initKind { return initKind{constant: true, lo: v} }

// uniformFor is U(±√(3/in)): zero mean, std 1/√in, as nvmai synth's matrices.
func uniformFor(in int) initKind {
	a := float32(math.Sqrt(3 / float64(in)))
	return initKind{lo: -a, hi: a}
}

type tensor struct {
	name   string
	ne     []int64 // ne[0] is the contiguous row
	typ    ggmlType
	init   initKind
	offset int64 // from the start of the data section
}

func (t *tensor) values() int64 {
	n := int64(1)
	for _, d := range t.ne {
		n *= d
	}
	return n
}

func (t *tensor) bytes() int64 { return t.values() / int64(t.typ.block) * int64(t.typ.blockBytes) }

// types are the widths of the three kinds of matrix.
type types struct{ weights, embedding, output ggmlType }

// recurrent says whether layer il is Gated DeltaNet (three of every four).
func recurrent(g packexperts.Geometry, il int) bool { return g.LayerTypes[il] == "linear_attention" }

func buildTensors(g packexperts.Geometry, ty types) ([]*tensor, int64, error) {
	H, V := int64(g.HiddenSize), int64(g.VocabSize)
	keyDim := int64(g.LinearNumKeyHeads * g.LinearKeyHeadDim)
	valueDim := int64(g.LinearNumValueHeads * g.LinearValueHeadDim)
	convDim := 2*keyDim + valueDim
	qDim := int64(g.NumAttentionHeads * g.HeadDim)
	kvDim := int64(g.NumKeyValueHeads * g.HeadDim)
	E, I, Is := int64(g.NumExperts), int64(g.MoeIntermediateSize), int64(g.SharedExpertIntermediateSize)
	w, one := ty.weights, constant(1)
	f32 := typeF32
	ts := []*tensor{{name: "token_embd.weight", ne: []int64{H, V}, typ: ty.embedding, init: uniformFor(int(H))}}
	add := func(name string, ne []int64, typ ggmlType, in initKind) {
		ts = append(ts, &tensor{name: name, ne: ne, typ: typ, init: in})
	}
	for il := 0; il < g.NumLayers; il++ {
		p := fmt.Sprintf("blk.%d.", il)
		add(p+"attn_norm.weight", []int64{H}, f32, one)
		if recurrent(g, il) {
			conv := float32(1 / math.Sqrt(float64(g.LinearConvKernelDim)))
			add(p+"attn_qkv.weight", []int64{H, convDim}, w, uniformFor(int(H)))
			add(p+"attn_gate.weight", []int64{H, valueDim}, w, uniformFor(int(H)))
			add(p+"ssm_conv1d.weight", []int64{int64(g.LinearConvKernelDim), convDim}, f32, initKind{lo: -conv, hi: conv})
			add(p+"ssm_dt.bias", []int64{int64(g.LinearNumValueHeads)}, f32, initKind{lo: -0.1, hi: 0.1})
			add(p+"ssm_a", []int64{int64(g.LinearNumValueHeads)}, f32, initKind{lo: -16, hi: -1})
			add(p+"ssm_beta.weight", []int64{H, int64(g.LinearNumValueHeads)}, w, uniformFor(int(H)))
			add(p+"ssm_alpha.weight", []int64{H, int64(g.LinearNumValueHeads)}, w, uniformFor(int(H)))
			add(p+"ssm_norm.weight", []int64{int64(g.LinearValueHeadDim)}, f32, one)
			add(p+"ssm_out.weight", []int64{valueDim, H}, w, uniformFor(int(valueDim)))
		} else {
			// Gated attention: q_proj rows are [query | gate] per head.
			add(p+"attn_q.weight", []int64{H, 2 * qDim}, w, uniformFor(int(H)))
			add(p+"attn_k.weight", []int64{H, kvDim}, w, uniformFor(int(H)))
			add(p+"attn_v.weight", []int64{H, kvDim}, w, uniformFor(int(H)))
			add(p+"attn_output.weight", []int64{qDim, H}, w, uniformFor(int(qDim)))
			add(p+"attn_q_norm.weight", []int64{int64(g.HeadDim)}, f32, one)
			add(p+"attn_k_norm.weight", []int64{int64(g.HeadDim)}, f32, one)
		}
		add(p+"post_attention_norm.weight", []int64{H}, f32, one)
		add(p+"ffn_gate_inp.weight", []int64{H, E}, f32, uniformFor(int(H))) // the router stays F32
		add(p+"ffn_gate_exps.weight", []int64{H, I, E}, w, uniformFor(int(H)))
		add(p+"ffn_up_exps.weight", []int64{H, I, E}, w, uniformFor(int(H)))
		add(p+"ffn_down_exps.weight", []int64{I, H, E}, w, uniformFor(int(I)))
		add(p+"ffn_gate_inp_shexp.weight", []int64{H, 1}, f32, uniformFor(int(H)))
		add(p+"ffn_gate_shexp.weight", []int64{H, Is}, w, uniformFor(int(H)))
		add(p+"ffn_up_shexp.weight", []int64{H, Is}, w, uniformFor(int(H)))
		add(p+"ffn_down_shexp.weight", []int64{Is, H}, w, uniformFor(int(Is)))
	}
	add("output_norm.weight", []int64{H}, f32, one)
	add("output.weight", []int64{H, V}, ty.output, uniformFor(int(H)))
	var off int64
	for _, t := range ts {
		if t.ne[0]%int64(t.typ.block) != 0 {
			return nil, 0, fmt.Errorf("%s: row of %d is not a multiple of the %s block", t.name, t.ne[0], t.typ.name)
		}
		t.offset = off
		off += alignUp(t.bytes())
	}
	return ts, off, nil
}

// Token ids the loader needs: the synthetic vocabulary is a placeholder
// (byte symbols, tok<i>, three control tokens at Qwen3.5's ids, padding).
const (
	idEndOfText = 248044
	idImStart   = 248045
	idImEnd     = 248046
	textTokens  = 248044
)

// gguf token types (llama.cpp llama-vocab.h).
const (
	tokNormal  = 1
	tokControl = 3
	tokUnused  = 5
)

func buildVocab(n int) (toks []string, kinds []int32) {
	toks = byteSymbols()
	toks = append(toks, "ĠĠ") // one real merge product, so the merges list is consistent
	for i := len(toks); i < min(textTokens, n); i++ {
		toks = append(toks, fmt.Sprintf("tok%d", i))
	}
	kinds = make([]int32, len(toks), n)
	for i := range kinds {
		kinds[i] = tokNormal
	}
	special := map[int]string{idEndOfText: "<|endoftext|>", idImStart: "<|im_start|>", idImEnd: "<|im_end|>"}
	for i := len(toks); i < n; i++ {
		if s, ok := special[i]; ok {
			toks, kinds = append(toks, s), append(kinds, tokControl)
			continue
		}
		toks, kinds = append(toks, fmt.Sprintf("[PAD%d]", i)), append(kinds, tokUnused)
	}
	return toks, kinds
}

// byteSymbols is GPT-2's bytes_to_unicode in the order byte-level
// vocabularies list their 256 byte tokens.
func byteSymbols() []string {
	var bs []int
	for _, r := range [][2]int{{'!', '~'}, {'¡', '¬'}, {'®', 'ÿ'}} {
		for b := r[0]; b <= r[1]; b++ {
			bs = append(bs, b)
		}
	}
	cs := append([]int(nil), bs...)
	in := map[int]bool{}
	for _, b := range bs {
		in[b] = true
	}
	extra := 0
	for b := 0; b < 256; b++ {
		if !in[b] {
			bs = append(bs, b)
			cs = append(cs, 256+extra)
			extra++
		}
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(rune(c))
	}
	return out
}

// fileTypes are llama_ftype values (llama.h) for general.file_type.
var fileTypes = map[string]uint32{"q4_0": 2, "q8_0": 7}

func buildKV(g packexperts.Geometry, ty types, seed uint64, label string) []kv {
	const a = "qwen35moe"
	toks, kinds := buildVocab(g.VocabSize)
	rec := make([]bool, g.NumLayers)
	for i := range rec {
		rec[i] = recurrent(g, i)
	}
	return []kv{
		{"general.architecture", a},
		{"general.type", "model"},
		{"general.name", fmt.Sprintf("synthetic qwen3.5-35b-a3b %dL %s seed %d", g.NumLayers, label, seed)},
		{"general.file_type", fileTypes[ty.weights.name]},
		{"general.quantization_version", uint32(2)},
		{"general.alignment", uint32(ggufAlignment)},
		{a + ".block_count", uint32(g.NumLayers)},
		{a + ".context_length", uint32(g.MaxPositionEmbeddings)},
		{a + ".embedding_length", uint32(g.HiddenSize)},
		{a + ".attention.head_count", uint32(g.NumAttentionHeads)},
		{a + ".attention.head_count_kv", uint32(g.NumKeyValueHeads)},
		{a + ".attention.key_length", uint32(g.HeadDim)},
		{a + ".attention.value_length", uint32(g.HeadDim)},
		{a + ".attention.layer_norm_rms_epsilon", float32(g.RMSNormEps)},
		{a + ".rope.freq_base", float32(g.RopeTheta)},
		{a + ".rope.dimension_count", uint32(float64(g.HeadDim) * g.PartialRotaryFactor)},
		{a + ".rope.dimension_sections", []int32{11, 11, 10, 0}},
		{a + ".expert_count", uint32(g.NumExperts)},
		{a + ".expert_used_count", uint32(g.NumExpertsPerTok)},
		{a + ".expert_feed_forward_length", uint32(g.MoeIntermediateSize)},
		{a + ".expert_shared_feed_forward_length", uint32(g.SharedExpertIntermediateSize)},
		{a + ".ssm.conv_kernel", uint32(g.LinearConvKernelDim)},
		{a + ".ssm.state_size", uint32(g.LinearKeyHeadDim)},
		{a + ".ssm.group_count", uint32(g.LinearNumKeyHeads)},
		{a + ".ssm.time_step_rank", uint32(g.LinearNumValueHeads)},
		{a + ".ssm.inner_size", uint32(g.LinearValueHeadDim * g.LinearNumValueHeads)},
		{a + ".attention.recurrent_layers", rec},
		{a + ".full_attention_interval", uint32(4)},
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", "qwen35"},
		{"tokenizer.ggml.tokens", toks},
		{"tokenizer.ggml.token_type", kinds},
		{"tokenizer.ggml.merges", []string{"Ġ Ġ"}},
		{"tokenizer.ggml.eos_token_id", uint32(idImEnd)},
		{"tokenizer.ggml.padding_token_id", uint32(idEndOfText)},
		{"tokenizer.ggml.bos_token_id", uint32(idEndOfText)},
		{"tokenizer.ggml.add_bos_token", false},
		// Ignored by llama.cpp; records how the bytes were made.
		{"synthetic.generator", generator},
		{"synthetic.seed", seed},
		{"synthetic.geometry", "qwen3.5-35b-a3b"},
		{"synthetic.weight_type", label},
	}
}
