package qwen38gpu

import (
	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// SetRouteOverride implements model.RouteOverrider: every MoE layer then
// routes the token at each position to the experts o names, weighed by
// the router's softmax at them renormalised over them, exactly as the CPU
// engine's replay (blocks.RouteFixed: top-10, the shared expert beside as
// always), so the logits stay bitwise the CPU engine's under the same
// replay wherever the resident ones are, resident or streamed (the
// streamed slots resolve the replayed ids). nil: the router's own again.
// The decode graphs are captured with one kind of routing, so switching
// kind recaptures them.
func (st *State) SetRouteOverride(o model.RouteOverride) {
	if (o == nil) != (st.replay.O == nil) {
		st.m.dev.Do(func(c *cuda.Ctx) error {
			st.dropGraphs(c)
			return nil
		})
	}
	st.replay.O = o
}

// ReplaysRouting reports that the engine's sequences take a routing
// override (SetRouteOverride), for bench and serve --routing.
func (b *Backend) ReplaysRouting() bool { return true }

// stageRoutes copies the replayed experts of a T-token pass to the device
// ahead of it (every qwen4_exp layer is a MoE layer). No-op without an
// override.
func (st *State) stageRoutes(c *cuda.Ctx, T int) error {
	g := st.m.g
	moe := make([]bool, len(st.m.layers))
	for i := range moe {
		moe[i] = true
	}
	return st.replay.Stage(c, &st.allocs, moe, st.pos, T, st.chunkLen, g.k, g.E, "qwen38gpu")
}

// route enqueues layer i's routing of T tokens into s.sel and s.weight:
// the router's top-k, or the replayed experts stageRoutes copied, before
// anything (the streamed slots' resolve included) reads s.sel.
func (st *State) route(l *gpukernels.Launcher, i, T int) error {
	s, g := &st.s, st.m.g
	if st.replay.O == nil {
		return l.Route(s.sel, s.weight, s.router, g.E, g.k, T, g.E)
	}
	return l.RouteFixed(s.sel, s.weight, s.router, st.replay.IDs+cuda.DevicePtr(4*i*T*g.k), g.E, g.k, T, g.E)
}
