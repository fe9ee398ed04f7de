package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// Source gives the experts a benchmark routes each token to instead of the
// router's own picks.
type Source interface {
	// Experts appends to dst[:0] the ids for run position pos (0 for the
	// run's first token, counting prefill tokens) at layer. It fails when a
	// trace is shorter than the run, unless the source wraps.
	Experts(pos, layer int, dst []int) ([]int, error)
	// Describe names the source for a report: "trace FILE sha256 HEX",
	// "synthetic agent seed=1".
	Describe() string
	// Wrapped says whether a trace had to repeat to cover the run so far.
	Wrapped() bool
}

// TraceSource replays a Trace: run position pos takes the trace's token
// pos (whatever position the trace recorded it at).
type TraceSource struct {
	t       *Trace
	desc    string
	wrap    bool
	wrapped atomic.Bool
}

// NewTraceSource replays t; desc is what Describe returns. With wrap, a
// run longer than t starts over at its first token.
func NewTraceSource(t *Trace, desc string, wrap bool) *TraceSource {
	return &TraceSource{t: t, desc: desc, wrap: wrap}
}

// OpenTrace parses the trace file at path for geom and describes it by its
// name and sha256, so a report says exactly which routing it replayed.
func OpenTrace(path string, geom Geometry, wrap bool) (*TraceSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("routing trace: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	t, err := Parse(io.TeeReader(f, h), geom)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewTraceSource(t, fmt.Sprintf("trace %s sha256 %s", path, hex.EncodeToString(h.Sum(nil))), wrap), nil
}

// Trace is the trace s replays.
func (s *TraceSource) Trace() *Trace { return s.t }

func (s *TraceSource) Experts(pos, layer int, dst []int) ([]int, error) {
	n := s.t.Tokens()
	if pos < 0 || layer < 0 || layer >= s.t.Geometry.Layers {
		return dst, fmt.Errorf("routing: position %d layer %d is outside %s", pos, layer, s.t.Geometry)
	}
	if pos >= n {
		if !s.wrap {
			return dst, fmt.Errorf("routing: %s has %d positions and the run needs position %d; record a longer trace or let it wrap", s.desc, n, pos)
		}
		s.wrapped.Store(true)
		pos %= n
	}
	return appendRow(dst[:0], s.t.Row(pos, layer)), nil
}

func (s *TraceSource) Describe() string { return s.desc }
func (s *TraceSource) Wrapped() bool    { return s.wrapped.Load() }

func appendRow(dst []int, row []int32) []int {
	for _, e := range row {
		dst = append(dst, int(e))
	}
	return dst
}

// SyntheticSource draws routing from a Regime as the run asks for it: any
// length, never wrapping, the same ids for the same seed.
type SyntheticSource struct {
	spec Spec
	mu   sync.Mutex
	gen  *generator
	t    *Trace
}

// NewSynthetic returns a source for spec over geom.
func NewSynthetic(geom Geometry, spec Spec) (*SyntheticSource, error) {
	t, err := NewTrace(geom, 0)
	if err != nil {
		return nil, err
	}
	g, err := newGenerator(geom, spec.Regime, spec.Seed)
	if err != nil {
		return nil, err
	}
	return &SyntheticSource{spec: spec, gen: g, t: t}, nil
}

func (s *SyntheticSource) Experts(pos, layer int, dst []int) ([]int, error) {
	g := s.t.Geometry
	if pos < 0 || layer < 0 || layer >= g.Layers {
		return dst, fmt.Errorf("routing: position %d layer %d is outside %s", pos, layer, g)
	}
	if pos >= MaxTraceIDs/(g.Layers*g.TopK) {
		return dst, fmt.Errorf("routing: position %d is past the %d positions a synthetic source holds for %s", pos, MaxTraceIDs/(g.Layers*g.TopK), g)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.t.Tokens() <= pos {
		s.gen.next(s.t)
	}
	return appendRow(dst[:0], s.t.Row(pos, layer)), nil
}

func (s *SyntheticSource) Describe() string { return s.spec.String() }
func (s *SyntheticSource) Wrapped() bool    { return false }
