package tokenizer

import (
	"strings"
	"sync"
)

// pairKey packs two adjacent token ids into one map key.
func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

// merge is what one ranked merge rule produces: its rank (index in
// model.merges, lower merges first) and the id of the merged token.
type merge struct {
	rank   int32
	result int32
}

// symbol is one node of the doubly linked list of tokens a piece is merged
// in. A node that was merged into its left neighbour has removed set.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	removed    bool
}

// candidate is a possible merge of symbols[pos] with its right neighbour.
type candidate struct {
	rank int32
	pos  int32
}

func (c candidate) before(d candidate) bool {
	return c.rank < d.rank || (c.rank == d.rank && c.pos < d.pos)
}

// mergePiece runs ranked BPE over the byte tokens of one piece and appends
// the resulting ids to dst. It repeatedly merges the adjacent pair of lowest
// rank, the leftmost among equal ranks, as the tokenizers library does: a
// min-heap of candidates ordered by (rank, position); a candidate whose pair
// has since changed is stale and skipped. Staleness is detected by looking
// the current pair up again: a pair's rank identifies it, and any change to
// either side makes the pair a longer, different string.
func (m *bpeModel) mergePiece(dst, byteIDs []int32) []int32 {
	syms := make([]symbol, len(byteIDs))
	for i, id := range byteIDs {
		syms[i] = symbol{id: id, prev: int32(i) - 1, next: int32(i) + 1}
	}
	syms[len(syms)-1].next = -1

	var heap candidateHeap
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			heap = append(heap, candidate{rank: mg.rank, pos: int32(i)})
		}
	}
	heap.init()

	for len(heap) > 0 {
		c := heap.pop()
		left := &syms[c.pos]
		if left.removed || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		mg, ok := m.merges[pairKey(left.id, right.id)]
		if !ok || mg.rank != c.rank {
			continue
		}
		left.id = mg.result
		right.removed = true
		left.next = right.next
		if left.next >= 0 {
			syms[left.next].prev = c.pos
		}
		if left.prev >= 0 {
			if pm, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				heap.push(candidate{rank: pm.rank, pos: left.prev})
			}
		}
		if left.next >= 0 {
			if nm, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
				heap.push(candidate{rank: nm.rank, pos: c.pos})
			}
		}
	}

	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

// candidateHeap is a binary min-heap ordered by candidate.before. It is
// written out rather than using container/heap to avoid boxing each element
// in an interface on the hot path.
type candidateHeap []candidate

func (h candidateHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candidateHeap) push(c candidate) {
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

func (h *candidateHeap) pop() candidate {
	old := *h
	top := old[0]
	last := len(old) - 1
	old[0] = old[last]
	*h = old[:last]
	h.down(0)
	return top
}

func (h candidateHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			return
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (h candidateHeap) down(i int) {
	for {
		smallest := i
		if l := 2*i + 1; l < len(h) && h[l].before(h[smallest]) {
			smallest = l
		}
		if r := 2*i + 2; r < len(h) && h[r].before(h[smallest]) {
			smallest = r
		}
		if smallest == i {
			return
		}
		h[i], h[smallest] = h[smallest], h[i]
		i = smallest
	}
}

// pieceCache remembers the ids of recently encoded pieces. Natural text
// repeats the same words constantly, so most pieces skip BPE entirely. The
// cache is bounded in entries and in the length of the pieces it keeps;
// when it fills it is emptied rather than tracking recency, which keeps the
// hot path to one map look-up and still lets frequent pieces back in at once.
type pieceCache struct {
	mu      sync.Mutex
	entries map[string][]int32
}

const (
	pieceCacheEntries  = 1 << 16
	pieceCacheMaxBytes = 64 // longer pieces are rare and not worth keeping
)

func (c *pieceCache) get(piece string) ([]int32, bool) {
	if len(piece) > pieceCacheMaxBytes {
		return nil, false
	}
	c.mu.Lock()
	ids, ok := c.entries[piece]
	c.mu.Unlock()
	return ids, ok
}

// put stores ids, which the cache then owns and never modifies.
func (c *pieceCache) put(piece string, ids []int32) {
	if len(piece) > pieceCacheMaxBytes {
		return
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= pieceCacheEntries {
		c.entries = make(map[string][]int32, 1024)
	}
	c.entries[strings.Clone(piece)] = ids // piece points into the caller's text
	c.mu.Unlock()
}
