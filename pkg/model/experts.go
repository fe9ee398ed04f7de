package model

// The expert contract: between a Mixture-of-Experts model and the store of
// its routed experts, so that the expert cache (pkg/expertcache) serves
// every architecture without importing any of them, and models read
// experts without knowing where they live.

import "github.com/nvmai/nvmai/pkg/kernels"

// Experts gives the routed experts of MoE layers; an implementation may read
// them from disk on demand.
type Experts interface {
	// Acquire returns gate [I, H], up [I, H] and down [H, I] for each id of
	// layer, in the order of ids. The matrices stay valid until release is
	// called; the model calls release exactly once when err is nil.
	Acquire(layer int, ids []int) (mats []ExpertMats, release func(), err error)
}

// AcquireLimiter is implemented by Experts that can hold only a bounded
// number of experts of a layer at once (a slot cache). The model then
// acquires a layer's experts in ascending batches of at most MaxAcquire ids,
// releasing each batch before the next. The batching never changes results.
type AcquireLimiter interface {
	MaxAcquire() int
}

// ExpertVisitor is implemented by Experts that can hand a layer's experts
// over one at a time as each becomes available (resident ones first, the
// others as their reads land), so computing one overlaps reading the next.
// When Experts implements it the model uses Visit instead of Acquire. Visit
// must call fn exactly once for every index of ids, in any order, on the
// caller's goroutine; the mats are valid only until fn returns. The order
// never changes results. Models visit a pass's layers in ascending order,
// so after a visit that asks for most of a layer's experts (a long prefill
// pass) an implementation may start reading layer+1's experts on a guess
// (expertcache's warm reads); that moves reads earlier and never changes
// what Visit hands over.
type ExpertVisitor interface {
	Visit(layer int, ids []int, fn func(i int, m ExpertMats) error) error
}

// ExpertGroupVisitor is ExpertVisitor handing over, in one call, every
// expert that is available at the same time (fn gets indices into ids and
// their mats, valid until it returns; every index exactly once overall).
// The model prefers it: in decode a group's gate and up products, and then
// its down products, each run as one parallel job instead of one per
// expert. Grouping never changes results.
type ExpertGroupVisitor interface {
	VisitGroups(layer int, ids []int, fn func(idx []int, mats []ExpertMats) error) error
}

// ExpertPrefetcher is implemented by Experts that can start reading
// experts before they are asked for (a slot cache on disk). In a decode
// step, as each layer ends, the model applies the next MoE layer's router
// to the hidden state as it stands (that layer's own router later sees it
// after attention) and passes the PrefetchWidth best-scoring experts, best
// first, to Prefetch. Prefetch must return without waiting for I/O and
// must not change what Acquire or Visit hand over: it only moves reads
// earlier. A PrefetchWidth of 0 skips the prediction.
type ExpertPrefetcher interface {
	PrefetchWidth() int
	Prefetch(layer int, ids []int)
}

// PassWarmer is implemented by Experts that can start reading the first
// MoE layer's experts before a pass routes to them (expertcache's warm
// reads). A model calls BeginPass with the pass's token count before its
// first layer runs; it must return without waiting for I/O and must not
// change what Acquire or Visit hand over.
type PassWarmer interface {
	BeginPass(tokens int)
}

// ExpertMats are the three matrices of one routed expert.
type ExpertMats struct{ Gate, Up, Down *kernels.Matrix }

// RouteOverride names the experts a MoE layer routes the token at a
// sequence position to, in place of the router's top-k: a benchmark
// replaying a routing trace or a synthetic one (pkg/routing). Experts
// appends the layer's top-k ids (in any order, distinct) to dst and
// returns it; an error (a trace too short) ends the forward.
type RouteOverride interface {
	Experts(pos, layer int, dst []int) ([]int, error)
}

// RouteOverrider is a State whose MoE layers can take their experts from
// o (nil: the router's own again). Everything else in the forward is
// unchanged: the routed weights are the router's softmax at those ids,
// renormalised as the model renormalises its own top-k. An engine whose
// experts are not routed on the host (a device holding them) does not
// implement it.
type RouteOverrider interface {
	SetRouteOverride(o RouteOverride)
}
