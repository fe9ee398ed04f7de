package routing

import "container/heap"

// Stats is an expert cache's replay of a trace, counted from cold.
type Stats struct {
	Slots            int     // per layer
	Accesses, Hits   int64   // expert uses over all tokens and layers
	HitRate          float64 // Hits / Accesses
	LayerMin         float64 // lowest per-layer hit rate
	LayerMax         float64 // highest per-layer hit rate
	NewPerLayerToken float64 // misses per layer per token
}

func finish(t *Trace, slots, from int, hits []int64) Stats {
	s := Stats{Slots: slots, LayerMin: 1}
	counted := max(t.Tokens()-from, 0)
	perLayer := int64(counted * t.Geometry.TopK)
	for _, h := range hits {
		s.Hits += h
		s.Accesses += perLayer
		r := float64(h) / float64(max(perLayer, 1))
		s.LayerMin = min(s.LayerMin, r)
		s.LayerMax = max(s.LayerMax, r)
	}
	s.HitRate = float64(s.Hits) / float64(max(s.Accesses, 1))
	s.NewPerLayerToken = float64(s.Accesses-s.Hits) / float64(max(int64(counted*t.Geometry.Layers), 1))
	return s
}

// SimulateLRU replays t through a per-layer LRU cache of slotsPerLayer
// experts, starting empty; each token's ids are used in the recorded order.
func SimulateLRU(t *Trace, slotsPerLayer int) Stats { return SimulateLRUFrom(t, slotsPerLayer, 0) }

// SimulateLRUFrom is SimulateLRU counting hits from token position from
// on: the earlier positions only warm the cache, as a prompt's do before
// the decode a bench measures.
func SimulateLRUFrom(t *Trace, slotsPerLayer, from int) Stats {
	g := t.Geometry
	hits := make([]int64, g.Layers)
	lastUse := make([]int, g.Experts) // use counter+1 of a resident expert, 0 = absent
	resident := make([]int32, 0, slotsPerLayer)
	for l := range g.Layers {
		clear(lastUse)
		resident = resident[:0]
		clock := 0
		for tok := range t.Tokens() {
			for _, e := range t.Row(tok, l) {
				clock++
				if lastUse[e] != 0 {
					if tok >= from {
						hits[l]++
					}
					lastUse[e] = clock
					continue
				}
				if slotsPerLayer <= 0 {
					continue
				}
				if len(resident) < slotsPerLayer {
					resident = append(resident, e)
				} else {
					victim := 0
					for i, r := range resident {
						if lastUse[r] < lastUse[resident[victim]] {
							victim = i
						}
					}
					lastUse[resident[victim]] = 0
					resident[victim] = e
				}
				lastUse[e] = clock
			}
		}
	}
	return finish(t, slotsPerLayer, from, hits)
}

// SimulateBelady replays t through the offline optimum: per layer, a miss
// evicts the resident expert used furthest in the future, never one the
// current token uses. It bounds from above what any cache of the same
// size can hit on t.
func SimulateBelady(t *Trace, slotsPerLayer int) Stats {
	return SimulateBeladyFrom(t, slotsPerLayer, 0)
}

// SimulateBeladyFrom is SimulateBelady counting hits from token position
// from on (see SimulateLRUFrom). It evicts as if it knew the whole trace,
// so it bounds the hits of any cache over the counted positions too.
func SimulateBeladyFrom(t *Trace, slotsPerLayer, from int) Stats {
	g := t.Geometry
	n := t.Tokens()
	const never = int(^uint(0) >> 1)
	hits := make([]int64, g.Layers)
	next := make([]int, n*g.TopK) // token of the next use of row entry j, per layer
	upcoming := make([]int, g.Experts)
	nextUse := make([]int, g.Experts) // of a resident expert; -1 = absent
	inToken := make([]int, g.Experts)
	for l := range g.Layers {
		for e := range upcoming {
			upcoming[e] = never
			nextUse[e] = -1
			inToken[e] = -1
		}
		for tok := n - 1; tok >= 0; tok-- {
			for j, e := range t.Row(tok, l) {
				next[tok*g.TopK+j] = upcoming[e]
			}
			for _, e := range t.Row(tok, l) {
				upcoming[e] = tok
			}
		}
		h := &useHeap{}
		resident := 0
		for tok := range n {
			row := t.Row(tok, l)
			for _, e := range row {
				inToken[e] = tok
			}
			var held []useEntry
			for j, e := range row {
				nu := next[tok*g.TopK+j]
				if nextUse[e] >= 0 {
					if tok >= from {
						hits[l]++
					}
					nextUse[e] = nu
					heap.Push(h, useEntry{nu, e})
					continue
				}
				if resident >= slotsPerLayer {
					evicted := false
					for h.Len() > 0 {
						top := heap.Pop(h).(useEntry)
						if nextUse[top.expert] != top.next {
							continue // stale
						}
						if inToken[top.expert] == tok {
							held = append(held, top)
							continue
						}
						nextUse[top.expert] = -1
						resident--
						evicted = true
						break
					}
					if !evicted {
						continue // every slot holds this token's experts: stream it
					}
				}
				nextUse[e] = nu
				resident++
				heap.Push(h, useEntry{nu, e})
			}
			for _, x := range held {
				heap.Push(h, x)
			}
		}
	}
	return finish(t, slotsPerLayer, from, hits)
}

type useEntry struct {
	next   int
	expert int32
}

// useHeap pops the furthest next use first.
type useHeap []useEntry

func (h useHeap) Len() int           { return len(h) }
func (h useHeap) Less(i, j int) bool { return h[i].next > h[j].next }
func (h useHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *useHeap) Push(x any)        { *h = append(*h, x.(useEntry)) }
func (h *useHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
