package gpu

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
)

// The decode profile (bench's gpu.decode_profile, docs/gpu.md "The decode
// profile"): a decode step's launches, the very ones the decode graph
// captures (forward with T = 1), run directly one kernel at a time, each
// between two events on an otherwise idle stream, over a few steps of a
// throwaway sequence; per kernel (named "phase/kernel" as the phase split
// names them) its launches, its time per step (the median over the steps),
// its share of the step, the bytes it reads and the rate that makes
// against the device-to-device copy rate measured in the same run.
//
// Timing one kernel alone: after the previous kernel the host waits for
// the stream, then enqueues a fill of a scratch buffer (decodeProfileBlocker
// bytes, ~20 µs on an H100) before the start event, so the stream is
// still busy while the host enqueues the start event and the kernel, and
// the kernel starts right after its start event: the time is the
// kernel's own, without the host's launch latency. The fill leaves L2
// holding its own bytes, so every kernel starts with a cold L2 (the
// weights are cold in a real step anyway: the step reads far more than
// L2 holds; the small activations are not, which costs the smallest
// kernels a little). Read-ahead launches (streamed experts) run on the
// side stream beside the timed kernels and are not rows; their wait shows
// in the next kernel on the stream.
//
// The bytes model (decodeStateBytes, gpukernels.Launcher.LastReads):
// weights exactly, each matrix's data, scales and biases over the rows it
// multiplies (the k picked experts of a gathered product, the shared
// expert's matrices, one embedding row); the KV cache each attention
// launch reads at the step's context (scores: K rows; values: V rows and
// the scores); the delta rule's state read and written back; the conv
// state, its input and weights; the residual row a norm reads; the logits
// argmax reads. Other activations (vectors of a few KiB) count 0, and so
// do the slot kernels' copies from pinned RAM (PCIe, not HBM: the copy
// wait measures them). A row's rate is bytes ÷ its time.

// DecodeProfile is a decode step kernel by kernel.
type DecodeProfile struct {
	Steps    int          `json:"steps"`          // decode steps profiled, after a warm-up step
	Context  int          `json:"context_tokens"` // tokens in the KV cache at the first profiled step
	Kernels  []KernelTime `json:"kernels"`        // longest total time first
	Launches int          `json:"launches_per_step"`
	// SumUs is the rows' times added: the step with every kernel alone.
	SumUs float64 `json:"sum_us_per_step"`
	Bytes int64   `json:"bytes_per_step"`
	// WeightBytes is the weights' part of Bytes: the model's weight bytes
	// a token plus one embedding row, when the model is right.
	WeightBytes int64   `json:"weight_bytes_per_step"`
	GBs         float64 `json:"gb_s"`       // Bytes ÷ SumUs
	OfCopyBW    float64 `json:"of_copy_bw"` // GBs ÷ the copy rate
	// GraphUs is the decode graph's step (0 when the plan runs decode
	// without a graph), EagerUs the same launches back to back without
	// events, both from the same Measure; GraphOverSum is GraphUs ÷ SumUs:
	// above 1 the graph leaves that much time between its kernels (what
	// launching and serialising them costs beyond the kernels), below 1
	// it overlaps them (PDL, the side stream) or the kernels alone ran
	// slower (from a cold L2).
	GraphUs       float64 `json:"graph_us_per_step,omitempty"`
	EagerUs       float64 `json:"eager_us_per_step,omitempty"`
	GraphOverSum  float64 `json:"graph_over_sum,omitempty"`
	CopyBandwidth float64 `json:"copy_bytes_per_s"` // device-to-device, bytes read + written
	Error         string  `json:"error,omitempty"`
}

// KernelTime is one kernel's row of DecodeProfile.
type KernelTime struct {
	Kernel    string  `json:"kernel"`   // phase/kernel
	Launches  int     `json:"launches"` // per step
	UsPerStep float64 `json:"us_per_step"`
	Share     float64 `json:"share"` // of SumUs
	Bytes     int64   `json:"bytes_per_step"`
	GBs       float64 `json:"gb_s"`
	OfCopyBW  float64 `json:"of_copy_bw"`
}

// launchSample is one timed launch.
type launchSample struct {
	kernel  string // phase/kernel
	us      float64
	bytes   int64 // weights included
	weights int64
}

const (
	// decodeProfileSteps is the decode steps the profile times.
	decodeProfileSteps = 5
	// decodeProfileBlocker is the fill that keeps the stream busy while
	// the host enqueues a kernel and its start event.
	decodeProfileBlocker = 64 << 20
)

// decodeProfileOn reads NVMAI_GPU_DECODE_PROFILE: 0 skips the profile
// (it takes a few hundred ms), 1 or unset runs it.
func decodeProfileOn(v string) (bool, error) {
	switch v {
	case "", "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("gpu: NVMAI_GPU_DECODE_PROFILE=%q: want 0 (skip the decode profile) or 1 (run it, the default)", v)
}

// measureDecodeProfile is Measure's decode profile after prompt tokens,
// with info's graph, eager and copy figures beside it; nil when
// NVMAI_GPU_DECODE_PROFILE=0. A failure is the profile's Error, not
// Measure's.
func (m *Model) measureDecodeProfile(prompt int, info *BenchInfo) *DecodeProfile {
	on, err := decodeProfileOn(os.Getenv("NVMAI_GPU_DECODE_PROFILE"))
	if err != nil {
		return &DecodeProfile{Error: err.Error()}
	}
	if !on {
		return nil
	}
	steps, ctx, err := m.decodeProfile(prompt, decodeProfileSteps)
	if err != nil {
		return &DecodeProfile{Error: err.Error()}
	}
	p := aggregateDecodeProfile(steps, info.CopyBandwidth)
	p.Context = ctx
	p.GraphUs, p.EagerUs = 1e3*info.GraphMsPerToken, 1e3*info.EagerMsPerToken
	if p.SumUs > 0 && p.GraphUs > 0 {
		p.GraphOverSum = p.GraphUs / p.SumUs
	}
	return p
}

// decodeProfile runs a throwaway sequence's prompt (ids 1 … 7 repeated,
// as Measure's) and one decode step, then times n decode steps kernel by
// kernel: each step's launches, and the context of the first.
func (m *Model) decodeProfile(prompt, n int) (steps [][]launchSample, ctx int, err error) {
	st, err := m.NewState(StateOptions{KVInitial: prompt + n + 8, KVBits: m.kvBits(), NoGraph: true})
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = 1 + i%7
	}
	if err := st.Forward(ids); err != nil {
		return nil, 0, err
	}
	if err := st.Forward([]int{1}); err != nil { // warm: the same launches, untimed
		return nil, 0, err
	}
	ctx = st.pos + 1
	err = m.dev.Do(func(c *cuda.Ctx) error {
		blocker, err := c.Alloc(decodeProfileBlocker)
		if err != nil {
			return fmt.Errorf("decode profile: %w", err)
		}
		defer c.Free(blocker)
		for range n {
			step, err := m.profileStep(c, st, blocker)
			if err != nil {
				return err
			}
			st.pos++ // the step's advance moved the device position
			steps = append(steps, step)
		}
		return nil
	})
	return steps, ctx, err
}

// profileStep runs one decode step at st's position with every kernel
// timed alone (see the top of this file) and returns its launches in
// order, each named by its phase.
func (m *Model) profileStep(c *cuda.Ctx, st *State, blocker cuda.DevicePtr) ([]launchSample, error) {
	var (
		samples []launchSample
		bounds  []int // launches when each phase ended
		names   []string
		start   *cuda.Event
		rerr    error
	)
	fail := func(err error) {
		if rerr == nil {
			rerr = err
		}
	}
	arm := func() { // the stream busy, then the next kernel's start event
		if err := c.Memset32(blocker, 0, decodeProfileBlocker/4); err != nil {
			fail(err)
			return
		}
		e, err := c.Record()
		if err != nil {
			fail(err)
			return
		}
		start = e
	}
	ctx := st.pos + 1
	l := &gpukernels.Launcher{C: c, K: m.ks, MMA: m.mma, GDNPipe: m.gdnPipe, GDNPar: m.gdnPar, GDNReg: m.gdnReg}
	l.After = func(kernel string) {
		if start == nil || rerr != nil {
			return
		}
		end, err := c.Record()
		if err != nil {
			fail(err)
			return
		}
		if err := c.Sync(); err != nil {
			fail(err)
		}
		ms, err := c.Elapsed(start, end)
		c.Destroy(start)
		c.Destroy(end)
		start = nil
		if err != nil {
			fail(err)
			return
		}
		w := l.LastReads()
		samples = append(samples, launchSample{kernel: kernel, us: 1e3 * ms, weights: w,
			bytes: w + decodeStateBytes(kernel, m.geom, ctx, st.kvBits)})
		arm()
	}
	if err := c.Sync(); err != nil {
		return nil, err
	}
	arm()
	err := m.forward(l, st, 1, func(ph string) { bounds, names = append(bounds, len(samples)), append(names, ph) })
	if serr := c.Sync(); err == nil {
		err = serr
	}
	if start != nil {
		c.Destroy(start)
	}
	if err == nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("decode profile: %w", err)
	}
	labelPhases(samples, bounds, names)
	return samples, nil
}

// labelPhases names each launch "phase/kernel": launch i belongs to the
// first phase that ended after it (bounds[j] launches had been made when
// names[j] ended), "?" past the last.
func labelPhases(samples []launchSample, bounds []int, names []string) {
	b := 0
	for i := range samples {
		for b < len(bounds) && bounds[b] <= i {
			b++
		}
		name := "?"
		if b < len(names) {
			name = names[b]
		}
		samples[i].kernel = name + "/" + samples[i].kernel
	}
}

// decodeStateBytes is what a decode launch of kernel reads besides its
// weights, as the profile models it (see the top of this file), at ctx
// tokens of context with a KV cache of kvBits.
func decodeStateBytes(kernel string, g geometry, ctx, kvBits int) int64 {
	values, scales := gpukernels.KVRowBytes(kvBits, g.kvd, g.attn.Dh)
	kvRows := int64(ctx) * (values + scales)
	switch {
	case strings.HasPrefix(kernel, "attn_scores"):
		return kvRows
	case strings.HasPrefix(kernel, "attn_values"):
		return kvRows + 4*int64(g.attn.Hq)*int64(ctx) // and the scores
	case strings.HasPrefix(kernel, "attn_kv"):
		return 2 * 4 * int64(g.kvd) // the new k and v
	case strings.HasPrefix(kernel, "gdn_rec"), kernel == "gdn_heads":
		return 2 * 4 * int64(g.gdn.Hv) * int64(g.gdn.Dk) * int64(g.gdn.Dv) // read and written back
	case kernel == "gdn_conv":
		return 4 * int64(g.C) * int64(2*g.K) // input, state (K−1 rows), weights (K rows)
	case kernel == "rmsnorm", kernel == "rmsnorm_q", kernel == "mgemv_n": // mgemv_n: besides its weights
		return 4 * int64(g.H)
	case kernel == "argmax":
		return 4 * int64(g.V)
	}
	return 0
}

// aggregateDecodeProfile sums the steps' launches by kernel: launches and
// bytes per step are the steps' mean, the time the median of each step's
// total (robust to a step the host or clock disturbed); rows by time,
// longest first, ties by name.
func aggregateDecodeProfile(steps [][]launchSample, copyBW float64) *DecodeProfile {
	p := &DecodeProfile{Steps: len(steps), CopyBandwidth: copyBW}
	if len(steps) == 0 {
		return p
	}
	type acc struct {
		launches int
		bytes    int64
		us       []float64 // per step
	}
	by := map[string]*acc{}
	var weights int64
	for s, step := range steps {
		for _, x := range step {
			weights += x.weights
			a := by[x.kernel]
			if a == nil {
				a = &acc{us: make([]float64, len(steps))}
				by[x.kernel] = a
			}
			a.launches++
			a.bytes += x.bytes
			a.us[s] += x.us
		}
	}
	n := len(steps)
	p.WeightBytes = weights / int64(n)
	for k, a := range by {
		row := KernelTime{Kernel: k, Launches: (a.launches + n/2) / n, UsPerStep: median(a.us), Bytes: a.bytes / int64(n)}
		p.Kernels = append(p.Kernels, row)
		p.Launches += row.Launches
		p.SumUs += row.UsPerStep
		p.Bytes += row.Bytes
	}
	sort.Slice(p.Kernels, func(i, j int) bool {
		a, b := p.Kernels[i], p.Kernels[j]
		if a.UsPerStep != b.UsPerStep {
			return a.UsPerStep > b.UsPerStep
		}
		return a.Kernel < b.Kernel
	})
	rate := func(bytes int64, us float64) (gbs, ofCopy float64) {
		if us <= 0 || bytes == 0 {
			return 0, 0
		}
		gbs = float64(bytes) / (us * 1e3)
		if copyBW > 0 {
			ofCopy = gbs * 1e9 / copyBW
		}
		return gbs, ofCopy
	}
	for i := range p.Kernels {
		r := &p.Kernels[i]
		if p.SumUs > 0 {
			r.Share = r.UsPerStep / p.SumUs
		}
		r.GBs, r.OfCopyBW = rate(r.Bytes, r.UsPerStep)
	}
	p.GBs, p.OfCopyBW = rate(p.Bytes, p.SumUs)
	return p
}

// median of xs (not empty); xs is reordered.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Lines is the profile as lines of the bench's text report: a summary
// line, then a table of the top rows by time (all when top ≤ 0) and a
// line for the rest.
func (p *DecodeProfile) Lines(top int) []string {
	if p.Error != "" {
		return []string{"gpu decode profile: failed: " + p.Error}
	}
	if len(p.Kernels) == 0 {
		return nil
	}
	against := "no decode graph"
	if p.GraphUs > 0 {
		against = fmt.Sprintf("the graph's step %.1f µs (graph ÷ sum %.2f)", p.GraphUs, p.GraphOverSum)
	}
	lines := []string{
		fmt.Sprintf("gpu decode profile (%d steps at %d tokens of context, each kernel alone between events): %d launches a step, %.1f µs summed against %s and %.1f µs launched back to back; %.1f MiB read (%.1f MiB of weights) → %.0f GB/s, %.0f%% of the %.0f GB/s copy",
			p.Steps, p.Context, p.Launches, p.SumUs, against, p.EagerUs, float64(p.Bytes)/(1<<20), float64(p.WeightBytes)/(1<<20), p.GBs, 100*p.OfCopyBW, p.CopyBandwidth/1e9),
		fmt.Sprintf("gpu decode  %-28s %8s %9s %6s %9s %7s %7s", "kernel", "launches", "µs/step", "share", "MiB/step", "GB/s", "of copy"),
	}
	rows := p.Kernels
	if top > 0 && len(rows) > top {
		rows = rows[:top]
	}
	for _, r := range rows {
		gbs, of := "–", "–"
		if r.Bytes > 0 && r.UsPerStep > 0 {
			gbs, of = fmt.Sprintf("%.0f", r.GBs), fmt.Sprintf("%.0f%%", 100*r.OfCopyBW)
		}
		lines = append(lines, fmt.Sprintf("gpu decode  %-28s %8d %9.1f %5.1f%% %9.2f %7s %7s",
			r.Kernel, r.Launches, r.UsPerStep, 100*r.Share, float64(r.Bytes)/(1<<20), gbs, of))
	}
	if rest := p.Kernels[len(rows):]; len(rest) > 0 {
		var us float64
		launches := 0
		for _, r := range rest {
			us += r.UsPerStep
			launches += r.Launches
		}
		share := 0.0
		if p.SumUs > 0 {
			share = us / p.SumUs
		}
		lines = append(lines, fmt.Sprintf("gpu decode  %-28s %8d %9.1f %5.1f%%", fmt.Sprintf("(%d more kernels)", len(rest)), launches, us, 100*share))
	}
	return lines
}
