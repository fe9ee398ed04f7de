package gpu

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/devshared"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// routeReplay is a sequence's replayed routing (SetRouteOverride): before
// each pass the host asks the override for every MoE layer's experts at
// the pass's positions and copies them to ids, which the pass's route
// launches (captured in the decode graph too) read in place of their own
// pick.
type routeReplay struct {
	o    model.RouteOverride
	ids  cuda.DevicePtr // int32 [layer][T][k] of the current pass (layer: the decoder's index)
	host []int32        // ids' staging on the host
	one  []int          // one position's experts, as the override appends them
}

// SetRouteOverride implements model.RouteOverrider: every MoE layer then
// routes the token at each position to the experts o names, weighed by
// the router's softmax at them renormalised over them, exactly as the CPU
// engine's replay (blocks.RouteFixed), so the logits stay bitwise the CPU
// engine's under the same replay, resident or streamed (the streamed
// slots resolve the replayed ids). nil: the router's own again. The decode
// graph is captured with one kind of routing, so switching kind
// recaptures it.
func (st *State) SetRouteOverride(o model.RouteOverride) {
	if (o == nil) != (st.replay.o == nil) && st.graph != nil {
		st.m.dev.Do(func(c *cuda.Ctx) error {
			c.DestroyGraph(st.graph)
			st.graph = nil
			return nil
		})
	}
	st.replay.o = o
}

// ReplaysRouting reports that the engine's sequences take a routing
// override (SetRouteOverride), for bench and serve --routing.
func (b *Backend) ReplaysRouting() bool { return true }

// stageRoutes copies the replayed experts of a T-token pass at the
// sequence's position to the device, ahead of the pass (ordered on the
// stream after the previous pass, whose launches read the old ids). No-op
// without an override.
func (st *State) stageRoutes(c *cuda.Ctx, T int) error {
	r := &st.replay
	if r.o == nil {
		return nil
	}
	g, L := st.m.geom, len(st.m.layers)
	if r.ids == 0 {
		p, err := c.Alloc(uint64(4 * max(L*st.chunkLen*g.k, 1)))
		if err != nil {
			return fmt.Errorf("gpu: no room for the replayed routing's ids: %w", err)
		}
		st.allocs = append(st.allocs, p)
		r.ids = p
	}
	moe := make([]bool, L)
	for i := range st.m.layers {
		moe[i] = st.m.layers[i].router != nil
	}
	var err error
	if r.host, r.one, err = gatherRoutes(r.o, moe, st.pos, T, g.k, g.E, r.host, r.one); err != nil {
		return err
	}
	return c.HtoDAsync(r.ids, cuda.Bytes(r.host))
}

// gatherRoutes is devshared.GatherRoutes (shared with qwen38gpu).
func gatherRoutes(o model.RouteOverride, moe []bool, pos, T, k, E int, dst []int32, one []int) ([]int32, []int, error) {
	return devshared.GatherRoutes(o, moe, pos, T, k, E, dst, one)
}

// route enqueues layer ly's routing of T tokens into s.sel and s.weight:
// the router's top-k, or the replayed experts stageRoutes copied, before
// anything (the streamed slots' resolve included) reads s.sel.
func (m *Model) route(l *gpukernels.Launcher, st *State, ly *layerW, T, stride int) error {
	s, g := &st.s, m.geom
	if st.replay.o == nil {
		return l.Route(s.sel, s.weight, s.router, g.E, g.k, T, stride)
	}
	layer := -1
	for i := range m.layers {
		if &m.layers[i] == ly {
			layer = i
		}
	}
	if layer < 0 {
		return fmt.Errorf("gpu: route: a layer outside the model")
	}
	return l.RouteFixed(s.sel, s.weight, s.router, st.replay.ids+cuda.DevicePtr(4*layer*T*g.k), g.E, g.k, T, stride)
}
