// Command hfsnapshot writes a Hugging Face-format bf16 snapshot of a
// synthetic geometry (random weights, fused expert layout, sharded with an
// index), so the converter can be measured on a checkpoint of real shape
// without downloading one. Used by scripts/convert-bench.sh; not a product
// binary.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

func main() {
	geometry := flag.String("geometry", "qwen3.5-35b-a3b", "synthetic geometry (see nvmai-convert synth)")
	layers := flag.Int("layers", 2, "decoder layers")
	out := flag.String("output", "", "snapshot directory to create")
	flag.Parse()
	if *out == "" {
		log.Fatal("--output is required")
	}
	sg, err := convert.LookupSynthGeometry(*geometry, *layers)
	if err != nil {
		log.Fatal(err)
	}
	if err := write(*out, sg); err != nil {
		log.Fatal(err)
	}
}

type spec struct {
	name  string
	shape []int64
}

// tensors lists the checkpoint's tensors, one shard per decoder layer plus
// one for the embedding, final norm and head.
func tensors(sg convert.SynthGeometry) [][]spec {
	g := sg.Geometry
	H, V := int64(g.HiddenSize), int64(g.VocabSize)
	p := "model.language_model."
	shards := [][]spec{{{p + "embed_tokens.weight", []int64{V, H}}, {p + "norm.weight", []int64{H}}, {"lm_head.weight", []int64{V, H}}}}
	for l, typ := range g.LayerTypes {
		L := fmt.Sprintf("%slayers.%d.", p, l)
		s := []spec{{L + "input_layernorm.weight", []int64{H}}, {L + "post_attention_layernorm.weight", []int64{H}}}
		if typ == "linear_attention" {
			kd, vd := int64(g.LinearNumKeyHeads*g.LinearKeyHeadDim), int64(g.LinearNumValueHeads*g.LinearValueHeadDim)
			hv := int64(g.LinearNumValueHeads)
			s = append(s, spec{L + "linear_attn.in_proj_qkv.weight", []int64{2*kd + vd, H}}, spec{L + "linear_attn.in_proj_z.weight", []int64{vd, H}},
				spec{L + "linear_attn.in_proj_b.weight", []int64{hv, H}}, spec{L + "linear_attn.in_proj_a.weight", []int64{hv, H}},
				spec{L + "linear_attn.conv1d.weight", []int64{2*kd + vd, 1, int64(g.LinearConvKernelDim)}},
				spec{L + "linear_attn.A_log", []int64{hv}}, spec{L + "linear_attn.dt_bias", []int64{hv}},
				spec{L + "linear_attn.norm.weight", []int64{int64(g.LinearValueHeadDim)}}, spec{L + "linear_attn.out_proj.weight", []int64{H, vd}})
		} else {
			q, kv, dh := int64(g.NumAttentionHeads*g.HeadDim), int64(g.NumKeyValueHeads*g.HeadDim), int64(g.HeadDim)
			s = append(s, spec{L + "self_attn.q_proj.weight", []int64{2 * q, H}}, spec{L + "self_attn.k_proj.weight", []int64{kv, H}},
				spec{L + "self_attn.v_proj.weight", []int64{kv, H}}, spec{L + "self_attn.o_proj.weight", []int64{H, q}},
				spec{L + "self_attn.q_norm.weight", []int64{dh}}, spec{L + "self_attn.k_norm.weight", []int64{dh}})
		}
		if sg.Architecture == packexperts.ArchQwen35MoE {
			E, I, Is := int64(g.NumExperts), int64(g.MoeIntermediateSize), int64(g.SharedExpertIntermediateSize)
			s = append(s, spec{L + "mlp.gate.weight", []int64{E, H}}, spec{L + "mlp.shared_expert_gate.weight", []int64{1, H}},
				spec{L + "mlp.shared_expert.gate_proj.weight", []int64{Is, H}}, spec{L + "mlp.shared_expert.up_proj.weight", []int64{Is, H}},
				spec{L + "mlp.shared_expert.down_proj.weight", []int64{H, Is}},
				spec{L + "mlp.experts.gate_up_proj", []int64{E, 2 * I, H}}, spec{L + "mlp.experts.down_proj", []int64{E, H, I}})
		} else {
			I := int64(g.IntermediateSize)
			s = append(s, spec{L + "mlp.gate_proj.weight", []int64{I, H}}, spec{L + "mlp.up_proj.weight", []int64{I, H}}, spec{L + "mlp.down_proj.weight", []int64{H, I}})
		}
		shards = append(shards, s)
	}
	return shards
}

func write(dir string, sg convert.SynthGeometry) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	weightMap := map[string]string{}
	var total int64
	rng := uint64(0x9e3779b97f4a7c15)
	for i, specs := range tensors(sg) {
		name := fmt.Sprintf("model-%05d.safetensors", i+1)
		n, err := writeShard(filepath.Join(dir, name), specs, &rng)
		if err != nil {
			return err
		}
		total += n
		for _, s := range specs {
			weightMap[s.name] = name
		}
	}
	index := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
	if err := writeJSON(filepath.Join(dir, "model.safetensors.index.json"), index); err != nil {
		return err
	}
	return copyMetadata(dir, sg)
}

// writeShard streams random bf16 values (|w| < 0.06) tensor by tensor.
func writeShard(path string, specs []spec, rng *uint64) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ts := make([]safetensors.TensorSpec, len(specs))
	for i, s := range specs {
		ts[i] = safetensors.TensorSpec{Name: s.name, DType: safetensors.BF16, Shape: s.shape}
	}
	w, err := safetensors.NewWriter(f, ts, map[string]string{"format": "pt"})
	if err != nil {
		return 0, err
	}
	var total int64
	for _, s := range specs {
		n := int64(2)
		for _, d := range s.shape {
			n *= d
		}
		buf := make([]byte, n)
		for i := 0; i < len(buf); i += 2 {
			*rng ^= *rng << 13
			*rng ^= *rng >> 7
			*rng ^= *rng << 17
			// sign, exponent 0x7a..0x7b (2^-5..2^-4), random mantissa
			binary.LittleEndian.PutUint16(buf[i:], uint16(*rng>>48)&0x807f|0x3d00)
		}
		if err := w.WriteTensor(s.name, buf); err != nil {
			return 0, err
		}
		total += n
	}
	return total, w.Close()
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// copyMetadata writes config.json from the geometry and copies the embedded
// model's tokenizer files.
func copyMetadata(dir string, sg convert.SynthGeometry) error {
	cfg, gen, err := convert.SynthConfigFiles(sg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), gen, 0o644); err != nil {
		return err
	}
	for _, n := range []string{"tokenizer.json", "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "tiny-moe-fused", n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
