// Package moe is the old address of the expert contract, now in pkg/model
// (experts.go). These aliases keep the architecture packages that still
// import it building; they go with the layout move (#36 item 3).
package moe

import "github.com/nvmai/nvmai/pkg/model"

type (
	Experts            = model.Experts
	AcquireLimiter     = model.AcquireLimiter
	ExpertVisitor      = model.ExpertVisitor
	ExpertGroupVisitor = model.ExpertGroupVisitor
	ExpertPrefetcher   = model.ExpertPrefetcher
	PassWarmer         = model.PassWarmer
	ExpertMats         = model.ExpertMats
)
