package model

import (
	"time"

	"github.com/nvmai/nvmai/pkg/kernels"
)

// StepPhase is one part of a decode step, as a StepProfile times it. The
// phases name the blocks the CPU architectures share (package blocks).
type StepPhase uint8

const (
	PhaseNorms           StepPhase = iota // RMS norms and residual adds
	PhaseGDNProjections                   // a Gated DeltaNet layer's qkv, z, a, b products (one job)
	PhaseGDNConv                          // its causal conv and SiLU
	PhaseGDNHeads                         // its delta rule and gated norm, every value head
	PhaseGDNOut                           // its output product
	PhaseAttnProjections                  // a full-attention layer's q (with gate), k, v products
	PhaseAttnHeads                        // its norms, RoPE, scores, softmax, values and gate
	PhaseAttnOut                          // its output product
	PhaseRouter                           // router, shared expert gate/up and its gate (one job)
	PhaseRouting                          // softmax and top-k
	PhasePrefetch                         // predicting the next layer's experts, starting their reads
	PhaseExpertWait                       // expert cache bookkeeping, reads in flight, output copies
	PhaseExpertGateUp                     // routed experts' gate and up products
	PhaseExpertDown                       // routed experts' down products (with the shared expert's, when fused)
	PhaseSharedDown                       // the shared expert's down product on its own
	PhaseCombine                          // weighted sum of the experts
	PhaseLMHead                           // final norm and lm_head
	NumStepPhases
)

var stepPhaseNames = [NumStepPhases]string{"norms", "gdn_proj", "gdn_conv", "gdn_heads", "gdn_out",
	"attn_proj", "attn_heads", "attn_out", "router", "routing", "prefetch", "expert_wait", "expert_gateup",
	"expert_down", "shared_down", "combine", "lm_head"}

func (p StepPhase) String() string {
	if p < NumStepPhases {
		return stepPhaseNames[p]
	}
	return "unknown"
}

// StepProfile accumulates, phase by phase over the single-token Forward
// calls (decode steps) of the States it is set on, the wall time and the
// bytes of weights and sequence state read: Bytes[p] / Time[p] is the rate
// a phase streams memory at, to set beside a plain read. Timing costs two
// clock reads per phase, about 20 µs per 40-layer step.
type StepProfile struct {
	Steps int
	Time  [NumStepPhases]time.Duration
	Bytes [NumStepPhases]int64
	last  time.Time
}

// Begin starts a step's clock; the time until the first mark goes there.
func (p *StepProfile) Begin() {
	if p != nil {
		p.Steps++
		p.last = time.Now()
	}
}

// Mark charges the time since the last mark, and bytes, to phase ph.
func (p *StepProfile) Mark(ph StepPhase, bytes int64) {
	if p == nil {
		return
	}
	now := time.Now()
	p.Time[ph] += now.Sub(p.last)
	p.Bytes[ph] += bytes
	p.last = now
}

// MarkProducts is Mark with the bytes of the matrices a phase multiplied by,
// counted only when profiling.
func (p *StepProfile) MarkProducts(ph StepPhase, ms ...*kernels.Matrix) {
	if p != nil {
		p.Mark(ph, MatrixBytes(ms...))
	}
}

// MatrixBytes is what a product reads of its matrices.
func MatrixBytes(ms ...*kernels.Matrix) int64 {
	var n int64
	for _, m := range ms {
		if m != nil {
			n += int64(len(m.Data) + len(m.Scales) + len(m.Biases))
		}
	}
	return n
}
