package qwen35

import (
	"math"
	"slices"
)

// samePrefix reports whether c and o hold bitwise the same first n tokens.
func (c *kvCache) samePrefix(o *kvCache, n int) bool {
	if c.bits != o.bits {
		return false
	}
	return samePrefixRows(&c.k, &o.k, n*c.row, n*c.row/kvGroup(c.dh)) && samePrefixRows(&c.v, &o.v, n*c.row, n*c.row/kvGroup(c.dh))
}

func samePrefixRows(a, b *kvRows, values, groups int) bool {
	switch {
	case a.f32 != nil:
		return slices.Equal(bits(a.f32[:values]), bits(b.f32[:values]))
	case a.b16 != nil:
		return slices.Equal(a.b16[:values], b.b16[:values])
	}
	return slices.Equal(a.q8[:values], b.q8[:values]) && slices.EqualFunc(a.scales[:groups], b.scales[:groups], func(x, y float32) bool {
		return math.Float32bits(x) == math.Float32bits(y)
	})
}
