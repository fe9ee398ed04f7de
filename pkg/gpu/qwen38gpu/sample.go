package qwen38gpu

import (
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/sample"
)

// Sampling on the device, as pkg/gpu samples (the same gpukernels
// launchers over this engine's logits): only the token id comes back.

// MaxCandidates is the most top-k candidates samp_cand takes (ties with
// the k-th included); a row with more is sampled on the host.
const MaxCandidates = devshared.MaxCandidates

func (st *State) sampAlloc(c *cuda.Ctx) (*devshared.SampBuffers, error) {
	if st.samp != nil {
		return st.samp, nil
	}
	b, err := devshared.AllocSamp(c, st.m.g.V, &st.allocs)
	if err != nil {
		return nil, err
	}
	st.samp = b
	return b, nil
}

// Sample picks st's token from the last logits on the device, as
// sample.Sampler.Finish does (docs/sampling.md), so only the id comes back.
// ok is false when the host must take the row: it holds a NaN or +Inf or
// no finite logit (the host reports those), or more than MaxCandidates
// tie for a top-k filter.
func (st *State) Sample(step sample.Step, history []int32) (id int, ok bool, err error) {
	var out [2]int32
	err = st.m.dev.Do(func(c *cuda.Ctx) error {
		b, err := st.sampAlloc(c)
		if err != nil {
			return err
		}
		l := &gpukernels.Launcher{C: c, K: st.m.ks}
		return b.Sample(c, l, st.cand, st.s.logits, st.next, step, history, &out)
	})
	if err != nil || out[0] < 0 || out[1] != 0 {
		return 0, false, err
	}
	st.sampled++
	return int(out[0]), true, nil
}
