package toolconstrain

import (
	"container/heap"
	"fmt"

	"github.com/nvmai/nvmai/pkg/jsonconstrain"
)

// A raw value with a pattern or a format reads its bytes through two
// automata at once: rawAC, which finds the closing "\n</parameter>" and the
// markup a value may not hold, and the value's DFA (jsonconstrain's
// RawString). Bytes that may still be the start of the closing tag are
// held back from the DFA until the tag completes (then the DFA must
// accept) or breaks off (then they were value). The product of the two is
// small (the DFA's states by rawAC's), so it is explored when the tool
// list compiles: dist says, per product state, the fewest characters the
// value still needs before it can close, -1 where none can finish it
// (markup the pattern would need, or a dead DFA), so the constraint never
// lets a value start that it cannot finish, within maxLength too.

type rawPattern struct {
	rs     *jsonconstrain.RawString
	maxLen int32 // characters, -1: none
	nk     int32 // rawAC's states
	dist   []int32
	start  int32
	// reps are bytes that between them step every product state as any
	// byte would (one per DFA class and rawAC class).
	reps []byte
}

// maxPatternProduct bounds the product states a pattern's table holds.
const maxPatternProduct = 1 << 21

// patEnd is the product "state" of a closed value.
const patEnd = int32(-2)

func newRawPattern(rs *jsonconstrain.RawString) (*rawPattern, error) {
	nk := int32(len(rawAC.out))
	if int64(rs.States())*int64(nk)*2 > maxPatternProduct {
		return nil, fmt.Errorf("its automaton has %d states, more than the raw value's constraint tracks beside the closing tag", rs.States())
	}
	p := &rawPattern{rs: rs, maxLen: int32(rs.MaxLength()), nk: nk}
	p.start = p.id(rs.Start(), rawAC.start, true)
	var markup [256]bool
	for s := range rawAC.next {
		for b := 0; b < 256; b++ {
			if rawAC.next[s][b] != 0 {
				markup[b] = true
			}
		}
	}
	seen := map[[2]int]bool{}
	for b := 0; b < 256; b++ {
		key := [2]int{int(rs.Class(byte(b))), -1}
		if markup[b] {
			key[1] = b
		}
		if !seen[key] {
			seen[key] = true
			p.reps = append(p.reps, byte(b))
		}
	}
	// Forward: the reachable states and their edges; backward: Dijkstra
	// from the close, a transition costing the characters it commits.
	n := int32(rs.States()) * nk * 2
	p.dist = make([]int32, n)
	reached := make([]bool, n)
	type edge struct{ from, to, cost int32 }
	var edges []edge
	var closing []int32
	queue := []int32{p.start}
	reached[p.start] = true
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, b := range p.reps {
			t, cost, ok := p.next(s, b)
			switch {
			case !ok:
			case t == patEnd:
				closing = append(closing, s)
			default:
				edges = append(edges, edge{s, t, cost})
				if !reached[t] {
					reached[t] = true
					queue = append(queue, t)
				}
			}
		}
	}
	// The edges by target, counting-sorted.
	first := make([]int32, n+1)
	for _, e := range edges {
		first[e.to+1]++
	}
	for i := int32(0); i < n; i++ {
		first[i+1] += first[i]
	}
	into := make([]edge, len(edges))
	fill := append([]int32(nil), first[:n]...)
	for _, e := range edges {
		into[fill[e.to]] = e
		fill[e.to]++
	}
	for i := range p.dist {
		p.dist[i] = -1
	}
	h := &distHeap{}
	for _, s := range closing {
		if p.dist[s] != 0 {
			p.dist[s] = 0
			heap.Push(h, [2]int32{0, s})
		}
	}
	for h.Len() > 0 {
		top := heap.Pop(h).([2]int32)
		if top[0] != p.dist[top[1]] {
			continue
		}
		for _, e := range into[first[top[1]]:first[top[1]+1]] {
			if d := top[0] + e.cost; p.dist[e.from] < 0 || d < p.dist[e.from] {
				p.dist[e.from] = d
				heap.Push(h, [2]int32{d, e.from})
			}
		}
	}
	if d := p.dist[p.start]; d < 0 || p.maxLen >= 0 && d > p.maxLen {
		return nil, fmt.Errorf("no value of its pattern can be written between the tags")
	}
	return p, nil
}

func (p *rawPattern) id(ds, k int32, phantom bool) int32 {
	s := (ds*p.nk + k) * 2
	if phantom {
		s++
	}
	return s
}

// next steps product state s over b: the state after it (patEnd when b
// closes the value), and the characters b commits to the value. The
// state holds the DFA's state over the bytes committed, rawAC's state,
// and whether the closing tag in progress began with the newline that
// opens the value (which is no part of it).
func (p *rawPattern) next(s int32, b byte) (t, cost int32, ok bool) {
	phantom := s&1 != 0
	ds, k := s/2/p.nk, s/2%p.nk
	k2 := int32(rawAC.next[k][b])
	switch rawAC.out[k2] {
	case acForbidden:
		return 0, 0, false
	case acEnd:
		return patEnd, 0, p.rs.Accepting(ds)
	}
	// The held bytes and b, less what is still held after b.
	d, d2 := int(rawAC.endDepth[k]), int(rawAC.endDepth[k2])
	n := d + 1 - d2
	i := 0
	if phantom && n > 0 {
		i = 1
	}
	for ; i < n; i++ {
		c := b
		if i < d {
			c = rawEnd[i]
		}
		if ds = p.rs.Step(ds, c); ds < 0 {
			return 0, 0, false
		}
		if c&0xC0 != 0x80 {
			cost++
		}
	}
	return p.id(ds, k2, phantom && n == 0), cost, true
}

// step advances a raw value's state over b, within maxLength.
func (p *rawPattern) step(st *state, b byte) (closed, ok bool) {
	t, cost, ok := p.next(st.k, b)
	switch {
	case !ok:
		return false, false
	case t == patEnd:
		return true, true
	}
	d := p.dist[t]
	if d < 0 || p.maxLen >= 0 && st.count+cost+d > p.maxLen {
		return false, false
	}
	st.k, st.count = t, st.count+cost
	return false, true
}

type distHeap [][2]int32

func (h distHeap) Len() int           { return len(h) }
func (h distHeap) Less(i, j int) bool { return h[i][0] < h[j][0] }
func (h distHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *distHeap) Push(x any)        { *h = append(*h, x.([2]int32)) }
func (h *distHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// endDepth is how much of the closing "\n</parameter>" a raw value's
// state has read.
func (m *machine) endDepth(st *state) uint8 {
	if p := m.g.tools[st.tool].params[st.param].pat; p != nil {
		return rawAC.endDepth[st.k/2%p.nk]
	}
	return rawAC.endDepth[st.k]
}
