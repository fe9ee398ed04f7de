package devshared

import (
	"fmt"
	"slices"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/model"
)

// RouteReplay is a sequence's replayed routing (SetRouteOverride): before
// each pass the host asks the override for every MoE layer's experts at
// the pass's positions and copies them to IDs, which the pass's route
// launches (captured in the decode graph too) read in place of their own
// pick (gpukernels' RouteFixed: the router's softmax at them renormalised
// over them, the CPU engine's blocks.RouteFixed).
type RouteReplay struct {
	O    model.RouteOverride
	IDs  cuda.DevicePtr // int32 [layer][T][k] of the current pass (layer: the decoder's index)
	host []int32        // IDs' staging on the host
	one  []int          // one position's experts, as the override appends them
}

// Stage copies the replayed experts of a T-token pass at pos to the
// device, ahead of the pass (ordered on the stream after the previous
// pass, whose launches read the old ids); IDs is allocated into allocs
// the first time, for passes of up to chunk tokens. No-op without an
// override.
func (r *RouteReplay) Stage(c *cuda.Ctx, allocs *[]cuda.DevicePtr, moe []bool, pos, T, chunk, k, E int, engine string) error {
	if r.O == nil {
		return nil
	}
	if r.IDs == 0 {
		p, err := c.Alloc(uint64(4 * max(len(moe)*chunk*k, 1)))
		if err != nil {
			return fmt.Errorf("%s: no room for the replayed routing's ids: %w", engine, err)
		}
		*allocs = append(*allocs, p)
		r.IDs = p
	}
	var err error
	if r.host, r.one, err = GatherRoutes(r.O, moe, pos, T, k, E, r.host, r.one); err != nil {
		return err
	}
	return c.HtoDAsync(r.IDs, cuda.Bytes(r.host))
}

// GatherRoutes asks o for the experts of positions [pos, pos+T) at every
// layer moe marks, and lays them out [layer][t][k] in dst (other layers'
// rows stay zero), each row ascending: the CPU engine's overrideRoutes,
// with its checks and its errors (a count other than k, an id outside
// [0, E), an id named twice, or the override's own).
func GatherRoutes(o model.RouteOverride, moe []bool, pos, T, k, E int, dst []int32, one []int) ([]int32, []int, error) {
	n := len(moe) * T * k
	dst = slices.Grow(dst[:0], n)[:n]
	clear(dst)
	for layer, isMoE := range moe {
		if !isMoE {
			continue
		}
		for t := range T {
			p := pos + t
			ids, err := o.Experts(p, layer, one[:0])
			if err != nil {
				return dst, one, fmt.Errorf("gpu: layer %d, position %d: routing override: %w", layer, p, err)
			}
			one = ids
			if len(ids) != k {
				return dst, one, fmt.Errorf("gpu: layer %d, position %d: the routing override named %d experts, the model routes each token to %d", layer, p, len(ids), k)
			}
			slices.Sort(ids)
			row := dst[(layer*T+t)*k : (layer*T+t+1)*k]
			for i, e := range ids {
				if e < 0 || e >= E {
					return dst, one, fmt.Errorf("gpu: layer %d, position %d: the routing override named expert %d; the layer has experts 0 to %d", layer, p, e, E-1)
				}
				if i > 0 && ids[i-1] == e {
					return dst, one, fmt.Errorf("gpu: layer %d, position %d: the routing override named expert %d twice", layer, p, e)
				}
				row[i] = int32(e)
			}
		}
	}
	return dst, one, nil
}
