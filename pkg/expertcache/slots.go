package expertcache

import "github.com/nvmai/nvmai/pkg/packexperts"

// SlotsPerLayer is the slot count New would give m's cache under opt (the
// slots, else the budget's, capped at the experts per layer), or New's
// error for a cache too small for one token. Footprint estimates use it so
// they can never disagree with the cache.
func SlotsPerLayer(m *packexperts.Manifest, opt Options) (int, error) {
	return slotsPerLayer(opt, m)
}
