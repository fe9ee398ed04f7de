package qwen38

import "github.com/nvmai/nvmai/pkg/model"

// SetRouteOverride makes every MoE layer route the token at each position
// to the experts o names (model.RouteOverride; nil: the router's own
// again). Clone does not carry it over.
func (s *State) SetRouteOverride(o model.RouteOverride) { s.ws.moe.Override = o }
