package qwen38gpu

import (
	"slices"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/sample"
)

// Sampling on the device, as pkg/gpu samples (the same gpukernels
// launchers over this engine's logits): only the token id comes back.

// MaxCandidates is the most top-k candidates samp_cand takes (ties with
// the k-th included); a row with more is sampled on the host.
const MaxCandidates = 1024

// sampBuffers are the device buffers of sampling on the device.
type sampBuffers struct {
	row     cuda.DevicePtr // the logits after penalties [V]
	counts  cuda.DevicePtr // the penalties' history as counts [V]
	maxID   cuda.DevicePtr // argmax of row
	w, bsum cuda.DevicePtr // samp_rows' weights [V] (float64) and block sums
	keys    cuda.DevicePtr // samp_rows' order keys [V] (uint64), for top-p
	cut     cuda.DevicePtr // top-p's cut (float64)
	out     cuda.DevicePtr // [0] the token, [1] samp_rows' status
	ids     cuda.DevicePtr // history tokens to count, sampUpload at a time
	synced  []int32        // the history counts holds
}

// sampUpload is how many history tokens one copy adds to the counts.
const sampUpload = 4096

func (st *State) sampAlloc(c *cuda.Ctx) (*sampBuffers, error) {
	if st.samp != nil {
		return st.samp, nil
	}
	V := st.m.g.V
	b := &sampBuffers{}
	for _, a := range []struct {
		p *cuda.DevicePtr
		n int
	}{{&b.row, 4 * V}, {&b.counts, 4 * V}, {&b.maxID, 4}, {&b.w, 8 * V}, {&b.keys, 8 * V}, {&b.cut, 8},
		{&b.bsum, 8 * gpukernels.SampBlocks(V)}, {&b.out, 16}, {&b.ids, 4 * sampUpload}} {
		p, err := c.Alloc(uint64(a.n))
		if err != nil {
			return nil, err
		}
		st.allocs = append(st.allocs, p)
		*a.p = p
	}
	if err := c.Memset32(b.counts, 0, uint64(V)); err != nil {
		return nil, err
	}
	st.samp = b
	return b, nil
}

// syncCounts makes the device's counts those of history: the new tokens
// are added, or, for another sampler's history, counted afresh.
func (b *sampBuffers) syncCounts(c *cuda.Ctx, l *gpukernels.Launcher, history []int32, V int) error {
	if len(history) < len(b.synced) || !slices.Equal(history[:len(b.synced)], b.synced) {
		if err := c.Memset32(b.counts, 0, uint64(V)); err != nil {
			return err
		}
		b.synced = b.synced[:0]
	}
	for add := history[len(b.synced):]; len(add) > 0; {
		n := min(len(add), sampUpload)
		if err := c.HtoD(b.ids, cuda.Bytes(add[:n])); err != nil {
			return err
		}
		if err := l.SampCount(b.counts, b.ids, n, V); err != nil {
			return err
		}
		b.synced = append(b.synced, add[:n]...)
		add = add[n:]
	}
	return nil
}

// Sample picks st's token from the last logits on the device, as
// sample.Sampler.Finish does (docs/sampling.md), so only the id comes back.
// ok is false when the host must take the row: it holds a NaN or +Inf or
// no finite logit (the host reports those), or more than MaxCandidates
// tie for a top-k filter.
func (st *State) Sample(step sample.Step, history []int32) (id int, ok bool, err error) {
	V := st.m.g.V
	var out [2]int32
	err = st.m.dev.Do(func(c *cuda.Ctx) error {
		b, err := st.sampAlloc(c)
		if err != nil {
			return err
		}
		l := &gpukernels.Launcher{C: c, K: st.m.ks}
		row, maxID := st.s.logits, st.next
		if step.Penalized() {
			if err := b.syncCounts(c, l, history, V); err != nil {
				return err
			}
			if err := l.SampPenalize(b.row, row, b.counts, V, step.RepetitionPenalty, step.PresencePenalty, step.FrequencyPenalty); err != nil {
				return err
			}
			row, maxID = b.row, b.maxID
			if err := l.Argmax(maxID, row, V); err != nil {
				return err
			}
			if step.Temperature == 0 {
				return c.DtoH(cuda.Bytes(out[:1]), maxID)
			}
		}
		if err := c.Memset32(b.out, 0, 2); err != nil {
			return err
		}
		if err := st.sampleRow(l, b, step, row, maxID); err != nil {
			return err
		}
		return c.DtoH(cuda.Bytes(out[:]), b.out)
	})
	if err != nil || out[0] < 0 || out[1] != 0 {
		return 0, false, err
	}
	st.sampled++
	return int(out[0]), true, nil
}

// sampleRow enqueues the sampled step's kernels over row: a top-k filter
// of at most MaxCandidates is finished over its list; otherwise the whole
// row is weighed (twice with top-p: for its cut, then within it) and drawn
// from.
func (st *State) sampleRow(l *gpukernels.Launcher, b *sampBuffers, step sample.Step, row, maxID cuda.DevicePtr) error {
	V := st.m.g.V
	k := step.TopK
	if k >= V {
		k = 0
	}
	if k > 0 && k <= MaxCandidates {
		if err := l.TopKCand(st.cand, row, V, k, MaxCandidates); err != nil {
			return err
		}
		return l.SampCand(b.out, st.cand, step.Temperature, step.TopP, step.LogMinP, step.U)
	}
	var thr, cut cuda.DevicePtr
	if k > 0 {
		if err := l.TopKCand(st.cand, row, V, k, 1); err != nil {
			return err
		}
		thr = st.cand + 8 // out[2], the threshold
	}
	T, status := step.Temperature, b.out+4
	if step.TopP > 0 {
		if err := l.SampRows(b.w, b.bsum, b.keys, status, row, maxID, thr, 0, V, T, 0, false); err != nil {
			return err
		}
		if err := l.SampNucleus(b.cut, b.keys, b.w, V, step.TopP); err != nil {
			return err
		}
		cut = b.cut
	}
	if err := l.SampRows(b.w, b.bsum, 0, status, row, maxID, thr, cut, V, T, step.LogMinP, true); err != nil {
		return err
	}
	return l.SampDraw(b.out, b.w, b.bsum, status, V, step.U)
}
