package qwen35

import "github.com/nvmai/nvmai/pkg/model"

// SetRouteOverride implements model.RouteOverrider: every MoE layer then
// routes the token at each position to the experts o names (nil: the
// router's own again). It lasts across CopyFrom, which copies the
// sequence, not the state's scratch.
func (s *State) SetRouteOverride(o model.RouteOverride) { s.ws.moe.Override = o }
