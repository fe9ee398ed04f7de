package devshared

import (
	"slices"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/sample"
)

// MaxCandidates is the most top-k candidates samp_cand takes (ties with
// the k-th included); a row with more is sampled on the host.
const MaxCandidates = 1024

// SampUpload is how many history tokens one copy adds to the counts.
const SampUpload = 4096

// SampBuffers are the device buffers of sampling on the device.
type SampBuffers struct {
	row     cuda.DevicePtr // the logits after penalties [V]
	counts  cuda.DevicePtr // the penalties' history as counts [V]
	maxID   cuda.DevicePtr // argmax of row
	w, bsum cuda.DevicePtr // samp_rows' weights [V] (float64) and block sums
	keys    cuda.DevicePtr // samp_rows' order keys [V] (uint64), for top-p
	cut     cuda.DevicePtr // top-p's cut (float64)
	out     cuda.DevicePtr // [0] the token, [1] samp_rows' status
	ids     cuda.DevicePtr // history tokens to count, SampUpload at a time
	synced  []int32        // the history counts holds
	V       int            // the vocabulary: the rows' length
}

// AllocSamp allocates the sampling buffers of a V-token vocabulary,
// appending each allocation to allocs (their owner frees them, also after
// an error).
func AllocSamp(c *cuda.Ctx, V int, allocs *[]cuda.DevicePtr) (*SampBuffers, error) {
	b := &SampBuffers{V: V}
	for _, a := range []struct {
		p *cuda.DevicePtr
		n int
	}{{&b.row, 4 * V}, {&b.counts, 4 * V}, {&b.maxID, 4}, {&b.w, 8 * V}, {&b.keys, 8 * V}, {&b.cut, 8},
		{&b.bsum, 8 * gpukernels.SampBlocks(V)}, {&b.out, 16}, {&b.ids, 4 * SampUpload}} {
		p, err := c.Alloc(uint64(a.n))
		if err != nil {
			return nil, err
		}
		*allocs = append(*allocs, p)
		*a.p = p
	}
	if err := c.Memset32(b.counts, 0, uint64(V)); err != nil {
		return nil, err
	}
	return b, nil
}

// syncCounts makes the device's counts those of history: the new tokens
// are added, or, for another sampler's history, counted afresh.
func (b *SampBuffers) syncCounts(c *cuda.Ctx, l *gpukernels.Launcher, history []int32, V int) error {
	if len(history) < len(b.synced) || !slices.Equal(history[:len(b.synced)], b.synced) {
		if err := c.Memset32(b.counts, 0, uint64(V)); err != nil {
			return err
		}
		b.synced = b.synced[:0]
	}
	for add := history[len(b.synced):]; len(add) > 0; {
		n := min(len(add), SampUpload)
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

// Sample enqueues the sampled step over the logits (whose argmax is at
// maxID; cand is topk_cand's buffer of 4+2·MaxCandidates int32) and copies
// the token and samp_rows' status into out, as sample.Sampler.Finish picks
// (docs/sampling.md). out[0] < 0 or out[1] != 0 means the host must take
// the row.
func (b *SampBuffers) Sample(c *cuda.Ctx, l *gpukernels.Launcher, cand, logits, maxID cuda.DevicePtr, step sample.Step, history []int32, out *[2]int32) error {
	V := b.V
	row := logits
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
	if err := b.SampleRow(l, cand, step, row, maxID); err != nil {
		return err
	}
	return c.DtoH(cuda.Bytes(out[:]), b.out)
}

// SampleRow enqueues the sampled step's kernels over row: a top-k filter
// of at most MaxCandidates is finished over its list; otherwise the whole
// row is weighed (twice with top-p: for its cut, then within it) and drawn
// from.
func (b *SampBuffers) SampleRow(l *gpukernels.Launcher, cand cuda.DevicePtr, step sample.Step, row, maxID cuda.DevicePtr) error {
	V := b.V
	k := step.TopK
	if k >= V {
		k = 0
	}
	if k > 0 && k <= MaxCandidates {
		if err := l.TopKCand(cand, row, V, k, MaxCandidates); err != nil {
			return err
		}
		return l.SampCand(b.out, cand, step.Temperature, step.TopP, step.LogMinP, step.U)
	}
	var thr, cut cuda.DevicePtr
	if k > 0 {
		if err := l.TopKCand(cand, row, V, k, 1); err != nil {
			return err
		}
		thr = cand + 8 // out[2], the threshold
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

// Sampler is a State's sampling on the device: its buffers, allocated by
// the first sampled step, and how many steps it decided (the tests').
type Sampler struct {
	buf     *SampBuffers
	Sampled int
}

// Buffers returns the sampling buffers, allocating them (into allocs) the
// first time.
func (s *Sampler) Buffers(c *cuda.Ctx, V int, allocs *[]cuda.DevicePtr) (*SampBuffers, error) {
	if s.buf != nil {
		return s.buf, nil
	}
	b, err := AllocSamp(c, V, allocs)
	if err != nil {
		return nil, err
	}
	s.buf = b
	return b, nil
}

// Sample picks a state's token from its last logits (their argmax at
// next) on the device, as sample.Sampler.Finish does (docs/sampling.md),
// so only the id comes back. ok is false when the host must take the row:
// it holds a NaN or +Inf or no finite logit (the host reports those), or
// more than MaxCandidates tie for a top-k filter.
func (s *Sampler) Sample(dev *cuda.Device, ks *gpukernels.Set, V int, allocs *[]cuda.DevicePtr, cand, logits, next cuda.DevicePtr, step sample.Step, history []int32) (id int, ok bool, err error) {
	var out [2]int32
	err = dev.Do(func(c *cuda.Ctx) error {
		b, err := s.Buffers(c, V, allocs)
		if err != nil {
			return err
		}
		l := &gpukernels.Launcher{C: c, K: ks}
		return b.Sample(c, l, cand, logits, next, step, history, &out)
	})
	if err != nil || out[0] < 0 || out[1] != 0 {
		return 0, false, err
	}
	s.Sampled++
	return int(out[0]), true, nil
}
