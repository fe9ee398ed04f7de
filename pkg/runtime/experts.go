package runtime

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/model"
)

// RouteTraceEnv names a file that receives one line per (decode position,
// layer): "position layer e0 … ek", the experts that layer used.
const RouteTraceEnv = "NVMAI_ROUTE_TRACE"

// ExpertOptions sizes the expert cache.
type ExpertOptions struct {
	Budget    int64 // bytes for expert slots, all layers together; 0 = expertcache.DefaultBudget
	Slots     int   // slots per layer; overrides Budget when positive
	IOThreads int   // reader goroutines; 0 = expertcache.DefaultIOThreads
	Prefetch  int   // experts per layer predicted and read ahead in decode; 0 = default, < 0 = off
	NoWarm    bool  // no warm reads in long prefill passes (expertcache.Options.NoWarm)
}

func openExperts(in *Install, opt ExpertOptions) (*expertcache.Cache, error) {
	mode, err := expertcache.BoundedIOFromEnv()
	if err != nil {
		return nil, err
	}
	return expertcache.New(in.Dir, in.Manifest, expertcache.Options{Budget: opt.Budget, Slots: opt.Slots, IOThreads: opt.IOThreads, IO: mode, Prefetch: opt.Prefetch, NoWarm: opt.NoWarm})
}

// tracedExperts records the routing of decode steps to a trace file; it
// passes everything else through to the cache.
type tracedExperts struct {
	*expertcache.Cache
	w        *bufio.Writer
	f        *os.File
	position int  // of the token being decoded
	decoding bool // only single-token steps are traced
}

func newTracedExperts(c *expertcache.Cache, path string) (*tracedExperts, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", RouteTraceEnv, err)
	}
	return &tracedExperts{Cache: c, f: f, w: bufio.NewWriter(f)}, nil
}

func (t *tracedExperts) record(layer int, ids []int) {
	if !t.decoding {
		return
	}
	line := strconv.AppendInt(nil, int64(t.position), 10)
	line = append(line, ' ')
	line = strconv.AppendInt(line, int64(layer), 10)
	for _, e := range ids {
		line = append(line, ' ')
		line = strconv.AppendInt(line, int64(e), 10)
	}
	t.w.Write(append(line, '\n'))
}

func (t *tracedExperts) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	t.record(layer, ids)
	return t.Cache.Acquire(layer, ids)
}

func (t *tracedExperts) Visit(layer int, ids []int, fn func(int, model.ExpertMats) error) error {
	t.record(layer, ids)
	return t.Cache.Visit(layer, ids, fn)
}

var _ model.ExpertGroupVisitor = (*tracedExperts)(nil)

// VisitGroups must be wrapped too: the embedded Cache's would be promoted
// and skip the trace.
func (t *tracedExperts) VisitGroups(layer int, ids []int, fn func([]int, []model.ExpertMats) error) error {
	t.record(layer, ids)
	return t.Cache.VisitGroups(layer, ids, fn)
}

func (t *tracedExperts) Close() error {
	err := t.w.Flush()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if cerr := t.Cache.Close(); err == nil {
		err = cerr
	}
	return err
}

// expertRequests is what the model asks of the streamed experts, the
// cache's own or through the route trace.
type expertRequests interface {
	Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error)
	Visit(layer int, ids []int, fn func(int, model.ExpertMats) error) error
	VisitGroups(layer int, ids []int, fn func([]int, []model.ExpertMats) error) error
	Close() error
}

// layerCount is one MoE layer's expert requests: experts served from a
// slot, experts read on demand, and requests that waited for a read.
type layerCount struct{ Hits, Misses, Waits int64 }

// countedExperts splits the cache's hits and misses by layer while on (a
// benchmark reports the spread across layers): each request's share is
// the counters' change across it, since the cache counts hits, misses and
// waits on the requesting goroutine. Off, it only passes requests on.
type countedExperts struct {
	*expertcache.Cache // everything the model finds by assertion: prefetch, warm reads, MaxAcquire
	next               expertRequests
	on                 bool
	layers             []layerCount // by decoder layer
}

var _ model.ExpertGroupVisitor = (*countedExperts)(nil)

func newCountedExperts(c *expertcache.Cache, next expertRequests, layers int) *countedExperts {
	return &countedExperts{Cache: c, next: next, layers: make([]layerCount, layers)}
}

// count adds the counters' change since before to layer.
func (c *countedExperts) count(layer int, before expertcache.Stats) {
	if layer < 0 || layer >= len(c.layers) {
		return
	}
	after := c.Cache.Stats()
	lc := &c.layers[layer]
	lc.Hits += after.Hits - before.Hits
	lc.Misses += after.Misses - before.Misses
	if after.WaitSeconds > before.WaitSeconds {
		lc.Waits++
	}
}

func (c *countedExperts) Acquire(layer int, ids []int) ([]model.ExpertMats, func(), error) {
	if !c.on {
		return c.next.Acquire(layer, ids)
	}
	before := c.Cache.Stats()
	mats, release, err := c.next.Acquire(layer, ids)
	c.count(layer, before)
	return mats, release, err
}

func (c *countedExperts) Visit(layer int, ids []int, fn func(int, model.ExpertMats) error) error {
	if !c.on {
		return c.next.Visit(layer, ids, fn)
	}
	before := c.Cache.Stats()
	err := c.next.Visit(layer, ids, fn)
	c.count(layer, before)
	return err
}

func (c *countedExperts) VisitGroups(layer int, ids []int, fn func([]int, []model.ExpertMats) error) error {
	if !c.on {
		return c.next.VisitGroups(layer, ids, fn)
	}
	before := c.Cache.Stats()
	err := c.next.VisitGroups(layer, ids, fn)
	c.count(layer, before)
	return err
}

func (c *countedExperts) Close() error { return c.next.Close() }

// snapshot copies the per-layer counts.
func (c *countedExperts) snapshot() []layerCount { return slices.Clone(c.layers) }
