package qwen38gpu

import (
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/sample"
)

// Sampling on the device, as pkg/gpu samples (the same gpukernels
// launchers over this engine's logits): only the token id comes back.

// MaxCandidates is the most top-k candidates samp_cand takes (ties with
// the k-th included); a row with more is sampled on the host.
const MaxCandidates = devshared.MaxCandidates

// Sample picks st's token from the last logits on the device
// (devshared.Sampler.Sample): ok is false when the host must take the row.
func (st *State) Sample(step sample.Step, history []int32) (id int, ok bool, err error) {
	return st.samp.Sample(st.m.dev, st.m.ks, st.m.g.V, &st.allocs, st.cand, st.s.logits, st.next, step, history)
}
