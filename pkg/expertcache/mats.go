package expertcache

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// slotMats views the expert record held in rec (stride bytes). A slot's
// buffer never moves, so its views are built once in New and handed out on
// every hit.
func slotMats(rec []byte, parts []packexperts.Tensor) (model.ExpertMats, error) {
	g, u, d, err := packexperts.ExpertViews(rec, parts)
	return model.ExpertMats{Gate: g, Up: u, Down: d}, err
}
