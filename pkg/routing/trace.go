// Package routing reads, writes, generates and simulates expert-routing
// traces: which experts each MoE layer picked for each token. A benchmark
// replays a trace instead of the router's own picks, so an expert cache can
// be measured under realistic locality (docs/routing.md).
package routing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Limits on a trace; a file past them is refused rather than read whole.
const (
	MaxLineBytes = 4096     // one "position layer e0 … ek" line
	MaxLayers    = 1024     // MoE layers per position
	MaxExperts   = 1 << 16  // experts per layer (ids fit in 16 bits)
	MaxTopK      = 64       // experts per token per layer
	MaxTraceIDs  = 64 << 20 // expert ids held in memory (4 bytes each)
)

// maxTraceIDs is MaxTraceIDs; a test lowers it to reach the limit quickly.
var maxTraceIDs = MaxTraceIDs

// Geometry is the routing shape of a model: layers with MoE, experts per
// layer, and experts picked per token (top-k).
type Geometry struct {
	Layers, Experts, TopK int
}

// Validate says which field of g is out of range.
func (g Geometry) Validate() error {
	switch {
	case g.Layers < 1 || g.Layers > MaxLayers:
		return fmt.Errorf("routing geometry: layers %d is out of range 1 to %d", g.Layers, MaxLayers)
	case g.Experts < 1 || g.Experts > MaxExperts:
		return fmt.Errorf("routing geometry: experts %d is out of range 1 to %d", g.Experts, MaxExperts)
	case g.TopK < 1 || g.TopK > MaxTopK || g.TopK > g.Experts:
		return fmt.Errorf("routing geometry: top-k %d is out of range 1 to %d", g.TopK, min(MaxTopK, g.Experts))
	}
	return nil
}

func (g Geometry) String() string {
	return fmt.Sprintf("%d layers, %d experts, top-%d", g.Layers, g.Experts, g.TopK)
}

// Trace is a whole routing trace: for each token, for each layer, TopK
// distinct expert ids in the order they were recorded.
type Trace struct {
	Geometry Geometry
	First    int     // position of the first token (a recorded decode starts after the prompt)
	ids      []int32 // [token][layer][k]
}

// NewTrace returns an empty trace of geom whose first position is first.
func NewTrace(geom Geometry, first int) (*Trace, error) {
	if err := geom.Validate(); err != nil {
		return nil, err
	}
	if first < 0 {
		return nil, fmt.Errorf("routing trace: first position %d is negative", first)
	}
	return &Trace{Geometry: geom, First: first}, nil
}

// Tokens is the number of positions in t.
func (t *Trace) Tokens() int {
	return len(t.ids) / (t.Geometry.Layers * t.Geometry.TopK)
}

// Row returns the ids of token index tok (0-based, not the position) at
// layer; the slice belongs to t and must not be changed.
func (t *Trace) Row(tok, layer int) []int32 {
	k := t.Geometry.TopK
	off := (tok*t.Geometry.Layers + layer) * k
	return t.ids[off : off+k : off+k]
}

// appendToken adds one token's picks, layers*topk ids, unchecked.
func (t *Trace) appendToken(ids []int32) { t.ids = append(t.ids, ids...) }

// WriteTo writes t in the NVMAI_ROUTE_TRACE format, one line per
// (position, layer): "position layer e0 … ek".
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	var n int64
	line := make([]byte, 0, 64)
	for tok := 0; tok < t.Tokens(); tok++ {
		for l := 0; l < t.Geometry.Layers; l++ {
			line = strconv.AppendInt(line[:0], int64(t.First+tok), 10)
			line = append(line, ' ')
			line = strconv.AppendInt(line, int64(l), 10)
			for _, e := range t.Row(tok, l) {
				line = append(line, ' ')
				line = strconv.AppendInt(line, int64(e), 10)
			}
			line = append(line, '\n')
			m, err := bw.Write(line)
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
	}
	return n, bw.Flush()
}

// Parse reads a trace in the NVMAI_ROUTE_TRACE format for geom: each
// position has one line per layer, layers 0 to geom.Layers-1 in order,
// each with exactly geom.TopK distinct ids below geom.Experts, and
// positions follow one another. Errors name the line and the field.
func Parse(r io.Reader, geom Geometry) (*Trace, error) {
	t, err := NewTrace(geom, 0)
	if err != nil {
		return nil, err
	}
	perToken := geom.Layers * geom.TopK
	maxTokens := maxTraceIDs / perToken
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), MaxLineBytes)
	seen := make([]int, geom.Experts) // line number that last used an id, for distinctness
	row := make([]int32, 0, perToken)
	lineNo, pos, layer := 0, 0, 0
	for sc.Scan() {
		lineNo++
		fields := bytes.Fields(sc.Bytes())
		if len(fields) != 2+geom.TopK {
			return nil, fmt.Errorf("routing trace line %d: %d fields, want %d (position, layer and %d expert ids)", lineNo, len(fields), 2+geom.TopK, geom.TopK)
		}
		p, err := parseField(fields[0], lineNo, "position", 1<<31-1-MaxTraceIDs) // positions stay in an int on 32-bit machines
		if err != nil {
			return nil, err
		}
		l, err := parseField(fields[1], lineNo, "layer", int64(geom.Layers)-1)
		if err != nil {
			return nil, err
		}
		if lineNo == 1 {
			if l != 0 {
				return nil, fmt.Errorf("routing trace line 1: layer %d, want 0 (a trace starts with layer 0 of its first position)", l)
			}
			pos = int(p)
			t.First = pos
		}
		if int(p) != pos {
			if layer != 0 {
				return nil, fmt.Errorf("routing trace line %d: position %d, want %d (layer %d of position %d is missing)", lineNo, p, pos, layer, pos)
			}
			if int(p) < pos {
				return nil, fmt.Errorf("routing trace line %d: position %d, want %d (positions must follow one another; a trace holds one session, so split one that records several)", lineNo, p, pos)
			}
			return nil, fmt.Errorf("routing trace line %d: position %d, want %d (positions must follow one another)", lineNo, p, pos)
		}
		if int(l) != layer {
			return nil, fmt.Errorf("routing trace line %d: layer %d, want %d (each position lists layers 0 to %d once, in order)", lineNo, l, layer, geom.Layers-1)
		}
		for j, f := range fields[2:] {
			e, err := parseField(f, lineNo, fmt.Sprintf("expert id %d", j), int64(geom.Experts)-1)
			if err != nil {
				return nil, err
			}
			if seen[e] == lineNo {
				return nil, fmt.Errorf("routing trace line %d: expert id %d appears twice; a layer picks %d distinct experts", lineNo, e, geom.TopK)
			}
			seen[e] = lineNo
			row = append(row, int32(e))
		}
		layer++
		if layer == geom.Layers {
			if t.Tokens() >= maxTokens {
				return nil, fmt.Errorf("routing trace line %d: more than %d positions of %s; use a shorter trace", lineNo, maxTokens, geom)
			}
			t.appendToken(row)
			row, layer = row[:0], 0
			pos++
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("routing trace line %d: longer than %d bytes", lineNo+1, MaxLineBytes)
		}
		return nil, fmt.Errorf("routing trace line %d: %w", lineNo+1, err)
	}
	if layer != 0 {
		return nil, fmt.Errorf("routing trace line %d: the trace ends after layer %d of position %d; layers %d to %d are missing", lineNo, layer-1, pos, layer, geom.Layers-1)
	}
	if t.Tokens() == 0 {
		return nil, errors.New("routing trace: no lines; record one with NVMAI_ROUTE_TRACE=FILE or write one with nvmai-run route-trace gen")
	}
	return t, nil
}

func parseField(f []byte, lineNo int, name string, maxV int64) (int64, error) {
	v, err := strconv.ParseInt(string(f), 10, 64)
	if err != nil || v < 0 || v > maxV {
		return 0, fmt.Errorf("routing trace line %d: %s %q is not an integer from 0 to %d", lineNo, name, truncate(f), maxV)
	}
	return v, nil
}

func truncate(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "…"
	}
	return string(b)
}
