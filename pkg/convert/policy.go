package convert

import (
	"fmt"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// SupportedBits are the install widths nvmai writes.
var SupportedBits = []int{4, 8, 16}

// BitsError explains why a width is refused and what to use instead.
type BitsError struct{ Bits int }

func (e *BitsError) Error() string {
	if e.Bits == 6 {
		return "--bits 6 is not supported: 6-bit was withdrawn because a 35B-A3B model at 6 bits does not fit a 24 GB machine and 6-bit codes pack badly into 32-bit words; use --bits 4 (smallest, fastest), --bits 8 (closest to the original) or --bits 16 (exact bf16)"
	}
	return fmt.Sprintf("--bits %d is not supported: choose 4, 8 or 16 (or 4,8 to write both quantized widths from one read of the source)", e.Bits)
}

// floatTensorSuffixes stay in float32 at every width: they are tiny, and
// norms, the GDN decay parameters and the conv taps are numerically
// sensitive (transformers itself keeps them in fp32 arithmetic).
var floatTensorSuffixes = []string{
	"input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight", "k_norm.weight", "linear_attn.norm.weight",
	"linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.conv1d.weight",
}

// bf16TensorSuffixes stay in bf16 at every width: the router and the gates
// decide which experts run, so 4-bit error there changes the routing itself,
// and they are small (router 256×2048, gates 1–32 rows). qwen4_exp's
// block_inject_weight ([S, S·H], 4 rows) sets the write gate of every
// residual stream, so it is kept likewise (q38 §6).
var bf16TensorSuffixes = []string{
	"mlp.gate.weight", "mlp.shared_expert_gate.weight",
	"linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight",
	"block_inject_weight.weight",
}

// eightBitTensors are the embedding and the output head: quantized to 8 bits
// even in a 4-bit install, because every logit goes through lm_head and the
// embedding row is read once per token (cheap), as the MLX community models do.
var eightBitTensors = []string{"model.embed_tokens.weight", "lm_head.weight"}

// ResidentEncoding chooses the storage of one resident tensor at install
// width bits. Its outcome is recorded per tensor in the manifest.
func ResidentEncoding(name string, shape []int64, bits int) packexperts.Encoding {
	if name == "model.norm.weight" || len(shape) != 2 || hasSuffix(name, floatTensorSuffixes) {
		return packexperts.EncF32
	}
	if bits == 16 || hasSuffix(name, bf16TensorSuffixes) || shape[1]%limits.QuantGroupSize != 0 {
		return packexperts.EncBF16
	}
	for _, n := range eightBitTensors {
		if name == n {
			return packexperts.EncQ8
		}
	}
	return packexperts.QuantEncoding(bits)
}

// ExpertEncoding is the storage of routed experts at install width bits.
func ExpertEncoding(bits int) packexperts.Encoding {
	if bits == 16 {
		return packexperts.EncBF16
	}
	return packexperts.QuantEncoding(bits)
}

func hasSuffix(name string, suffixes []string) bool {
	for _, s := range suffixes {
		if strings.HasSuffix(name, "."+s) || name == s {
			return true
		}
	}
	return false
}
