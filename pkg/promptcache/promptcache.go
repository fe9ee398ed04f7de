// Package promptcache keeps copies of model state for token prefixes, so a
// request that starts with tokens an earlier one already processed resumes
// from the copy instead of prefilling them again.
//
// Entries are exact: a copy taken after N tokens can only resume a prompt
// at position N (hybrid models carry a recurrent state that summarises every
// token and cannot be cut back). Callers therefore store several entries
// per prompt (message boundaries, end of prompt, end of reply) and Lookup
// picks the longest one that is a prefix of the new prompt. Memory is
// bounded by a byte budget over the entries' declared sizes, evicting the
// least recently used, so a side request (a title, a summary) between two
// turns of a conversation does not push the conversation out unless the
// budget cannot hold both.
//
// Disk is the tier below: entry files in one directory that a restarted
// server finds again (docs/prompt-cache.md).
package promptcache

import (
	"slices"
	"sync"
)

// Cache maps token prefixes to values of type V. It is safe for concurrent use.
type Cache[V any] struct {
	mu      sync.Mutex
	budget  int64
	used    int64
	clock   uint64
	entries []*entry[V]
	stats   Stats
}

type entry[V any] struct {
	tokens []int
	value  V
	bytes  int64
	used   uint64 // clock of the last Put or hit
}

// Stats counts what the cache did.
type Stats struct {
	Entries   int   `json:"entries"`
	Bytes     int64 `json:"bytes"`
	Budget    int64 `json:"budget"`
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Evictions int64 `json:"evictions"`
}

// New returns a cache holding at most budget bytes of entries (0 disables it).
func New[V any](budget int64) *Cache[V] {
	return &Cache[V]{budget: max(budget, 0)}
}

// Lookup returns the longest entry whose tokens are a prefix of ids (ids
// itself included) and marks it recently used. n is its token count.
func (c *Cache[V]) Lookup(ids []int) (n int, v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *entry[V]
	for _, e := range c.entries {
		if len(e.tokens) <= len(ids) && (best == nil || len(e.tokens) > len(best.tokens)) && slices.Equal(e.tokens, ids[:len(e.tokens)]) {
			best = e
		}
	}
	if best == nil {
		c.stats.Misses++
		return 0, v, false
	}
	c.stats.Hits++
	c.clock++
	best.used = c.clock
	return len(best.tokens), best.value, true
}

// Peek returns the entry for exactly tokens and marks it recently used,
// without counting a hit or a miss (a caller about to store tokens asks
// whether it already has them).
func (c *Cache[V]) Peek(tokens []int) (v V, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.find(tokens)
	if i < 0 {
		return v, false
	}
	c.clock++
	c.entries[i].used = c.clock
	return c.entries[i].value, true
}

// Put stores value for tokens (replacing an entry with the same tokens),
// evicting least recently used entries until it fits. A value larger than
// the whole budget is not stored; Put reports whether it was.
func (c *Cache[V]) Put(tokens []int, value V, bytes int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes > c.budget || len(tokens) == 0 {
		return false
	}
	c.clock++
	if i := c.find(tokens); i >= 0 {
		c.used -= c.entries[i].bytes
		c.entries = slices.Delete(c.entries, i, i+1)
	}
	for c.used+bytes > c.budget {
		c.evictOldest()
	}
	c.entries = append(c.entries, &entry[V]{tokens: slices.Clone(tokens), value: value, bytes: bytes, used: c.clock})
	c.used += bytes
	return true
}

func (c *Cache[V]) find(tokens []int) int {
	return slices.IndexFunc(c.entries, func(e *entry[V]) bool { return slices.Equal(e.tokens, tokens) })
}

func (c *Cache[V]) evictOldest() {
	oldest := 0
	for i, e := range c.entries {
		if e.used < c.entries[oldest].used {
			oldest = i
		}
	}
	c.used -= c.entries[oldest].bytes
	c.entries = slices.Delete(c.entries, oldest, oldest+1)
	c.stats.Evictions++
}

// Clear drops every entry.
func (c *Cache[V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries, c.used = nil, 0
}

// Stats reports the cache's contents and counters.
func (c *Cache[V]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries, s.Bytes, s.Budget = len(c.entries), c.used, c.budget
	return s
}
