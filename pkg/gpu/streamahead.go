package gpu

import (
	"fmt"
	"os"
	"strconv"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
)

// Cross-layer read-ahead (docs/gpu.md, "Streaming experts into VRAM").
// Guessing a layer's picks from the hidden state entering that same layer
// (distance 0) leaves its copies only the layer's mixer to hide behind,
// ~60 µs on the H100 against ~110 µs of copies a layer: the guesses are
// right but the step does not get faster. At distance D (
// NVMAI_GPU_READAHEAD_DIST=D, default 0: the cross-layer path is bitwise
// on an H100 (session 19) but its speed is not yet measured) layer j's guess is made from the
// hidden state entering layer j−D (layer 0 guesses layers 0 … D, there
// being no earlier state), and its copies run on the side stream beside
// D whole layers and layer j's mixer. Each target layer's side work ends
// with its own mark (cuda.MarkSide), which the stream waits for only
// right before layer j's slot_resolve (joinAhead): the side stream runs
// the targets in layer order, so waiting for mark j waits for every
// earlier target too, never for a later one.
//
// Why this is race-free and leaves the numbers as they were:
//   - Target j's side work (router product, slot_prefetch,
//     slot_fill_ahead) touches only layer j's table, pool and counters,
//     and its own guess scratch. Nothing on the stream touches layer j's
//     table or pool between the issue and the wait but layer j itself,
//     which runs after the wait; the previous step's use of them was
//     earlier on the stream, which the fork orders before.
//   - Within layer j, slot_prefetch stamps and fills before slot_resolve
//     (the wait), so no slot the layer's picks use is written while they
//     are read, and a slot's bytes are always its expert's: the products
//     read the same bytes as the resident engine, the guesses only decide
//     which copies happen early.
//   - The guess scratch is a ring of D+1 (aheadScratch by j mod D+1): at
//     most D+1 targets are in flight (j … j+D while layer j runs), and
//     target j+D+1, which reuses j's scratch, is normed on the stream at
//     layer j+1's start, after layer j's wait for mark j, which follows
//     target j's router product, the scratch's last reader.
//   - In a graph capture every fork is joined: each issued target is
//     waited for at its layer, and the last target's mark follows all the
//     side work (finishAhead joins whatever a failed layer left, so
//     EndCapture never sees an unjoined fork).

// aheadScratch is one in-flight target's guess scratch.
type aheadScratch struct {
	u      cuda.DevicePtr // [H] the hidden state normed for the guess
	logits cuda.DevicePtr // [E] the router's logits on it
	q      gpukernels.QAct
}

// maxAheadDist is the farthest NVMAI_GPU_READAHEAD_DIST may reach.
const maxAheadDist = 8

// aheadDistFromEnv reads NVMAI_GPU_READAHEAD_DIST: how many layers before
// its own a streamed layer's picks are guessed and copied. The default is
// 0: the guess from the layer's own input; 1 … maxAheadDist opt in to the
// cross-layer read-ahead (bitwise on an H100 in session 19, its speed not
// yet measured).
func aheadDistFromEnv() (int, error) {
	v := os.Getenv("NVMAI_GPU_READAHEAD_DIST")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxAheadDist {
		return 0, fmt.Errorf("gpu: NVMAI_GPU_READAHEAD_DIST=%q: want a layer count from 0 to %d (default 0: the read-ahead inside the layer; 1 or more reads ahead across layers)", v, maxAheadDist)
	}
	return n, nil
}

// aheadTargets is the layers whose read-ahead the step issues at the start
// of layer i of n, at distance d: [lo, hi). Layer 0 issues 0 … d (no
// earlier hidden state exists), every later layer i issues i+d alone.
func aheadTargets(i, d, n int) (lo, hi int) {
	if i == 0 {
		return 0, min(d+1, n)
	}
	if i+d >= n {
		return n, n
	}
	return i + d, i + d + 1
}

// allocAhead gives the streamer its guess scratch ring and the side
// stream's marks, one per layer.
func (x *streamer) allocAhead(c *cuda.Ctx, g geometry, layers int, alloc func(int64) cuda.DevicePtr) error {
	if err := c.SideStream(); err != nil {
		return err
	}
	if err := c.SideMarks(layers); err != nil {
		return err
	}
	q8, q4, ds := gpukernels.QActBytes(1, g.H)
	x.scratch = make([]aheadScratch, x.aheadDist+1)
	for i := range x.scratch {
		x.scratch[i] = aheadScratch{u: alloc(4 * int64(g.H)), logits: alloc(4 * int64(g.E)),
			q: gpukernels.QAct{Q8: alloc(q8), Q4: alloc(q4), DX: alloc(ds), SX: alloc(ds)}}
	}
	x.pending = make([]bool, layers)
	return nil
}

// readAhead enqueues, at the start of layer i of a decode step, the
// read-ahead of every streamed layer aheadTargets names (see the top of
// this file): for each, the norm on the stream, then the router product,
// slot_prefetch, slot_fill_ahead and the target's mark on the side stream.
// It reports whether it enqueued anything.
func (m *Model) readAhead(l *gpukernels.Launcher, st *State, i int, do func(error)) bool {
	if !m.readsAhead(st) {
		return false
	}
	x, g := m.stream, m.geom
	lo, hi := aheadTargets(i, x.aheadDist, len(m.layers))
	issued := false
	for j := lo; j < hi; j++ {
		ly := &m.layers[j]
		sl := ly.stream
		if sl == nil || ly.router == nil {
			continue
		}
		sc := &x.scratch[j%len(x.scratch)]
		// The norm reads x, which the layers between rewrite in place: it
		// runs on the stream, into the target's own scratch (the step's
		// quantized activations are left as they were). The rest reads
		// only that scratch and layer j's table and pool, which nothing on
		// the stream touches until the wait, so it all runs on the side.
		if ly.router.Quantized() {
			do(l.RMSNormQuantize(&sc.q, sc.u, st.s.x, ly.postNorm, g.H, 1, g.eps))
		} else {
			do(l.RMSNorm(sc.u, st.s.x, ly.postNorm, g.H, 1, g.eps))
		}
		do(l.C.Fork())
		side := *l
		side.C, side.After = l.C.Side(), nil
		do(side.GEMV(sc.logits, ly.router, sc.u, &sc.q, 0, 0, 1, false, 1))
		do(side.SlotPrefetch(sl.tab, sl.stats, sc.logits, g.E, x.slots, g.k, x.stride))
		do(side.SlotFillAhead(sl.pool, sl.hostDev, sl.tab, g.E, x.slots, g.k, x.stride, x.aheadBlocks, x.noCopy))
		do(l.C.MarkSide(j))
		l.Count = side.Count
		x.pending[j] = true
		issued = true
	}
	return issued
}

// joinAhead makes layer j's slot_resolve wait for its read-ahead, when one
// was issued.
func (m *Model) joinAhead(l *gpukernels.Launcher, j int, do func(error)) {
	x := m.stream
	if x == nil || x.pending == nil || !x.pending[j] {
		return
	}
	x.pending[j] = false
	do(l.C.WaitMark(j))
}

// finishAhead joins read-ahead still pending at the end of a pass (only a
// pass cut short leaves any), so a capture ends with every fork joined and
// the next pass starts with none.
func (m *Model) finishAhead(l *gpukernels.Launcher, do func(error)) {
	x := m.stream
	if x == nil || x.pending == nil {
		return
	}
	for j, p := range x.pending {
		if p {
			x.pending[j] = false
			do(l.C.WaitMark(j))
		}
	}
}
