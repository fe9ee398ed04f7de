package runtime

import (
	"bufio"
	"fmt"
	"os"
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
