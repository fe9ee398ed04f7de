// Package routefix builds the synthetic routing sources the GPU engines'
// replay tests feed (pkg/gpu and qwen38gpu), the same way for both.
package routefix

import (
	"testing"

	"github.com/nvmai/nvmai/pkg/routing"
)

// Engine is what a source needs of an engine: its routing geometry
// (*runtime.Engine has it).
type Engine interface {
	RoutingGeometry() (routing.Geometry, error)
}

// Synthetic is the synthetic routing source spec names (routing.ParseSpec:
// "synthetic:agent", "synthetic:diverse", …) over e's routing geometry.
func Synthetic(t testing.TB, e Engine, spec string) *routing.SyntheticSource {
	t.Helper()
	geom, err := e.RoutingGeometry()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := routing.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	src, err := routing.NewSynthetic(geom, sp)
	if err != nil {
		t.Fatal(err)
	}
	return src
}
