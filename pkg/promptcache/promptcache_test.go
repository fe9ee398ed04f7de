package promptcache

import "testing"

func ids(n int, base int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func TestLookupPicksTheLongestPrefix(t *testing.T) {
	c := New[string](1000)
	conv := ids(10, 0)
	c.Put(conv[:3], "three", 10)
	c.Put(conv[:7], "seven", 10)
	c.Put(ids(5, 100), "other", 10)
	cases := []struct {
		name  string
		query []int
		n     int
		v     string
		ok    bool
	}{
		{"extends the longest", conv, 7, "seven", true},
		{"exact length counts", conv[:7], 7, "seven", true},
		{"between entries", conv[:5], 3, "three", true},
		{"shorter than any", conv[:2], 0, "", false},
		{"diverges after 3", append(append([]int{}, conv[:4]...), 99, 98, 97, 96), 3, "three", true},
		{"unrelated", ids(4, 50), 0, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, v, ok := c.Lookup(tc.query)
			if n != tc.n || v != tc.v || ok != tc.ok {
				t.Fatalf("Lookup = %d %q %v, want %d %q %v", n, v, ok, tc.n, tc.v, tc.ok)
			}
		})
	}
}

// A conversation A, a side request B, then A again: with room for both,
// B's entries do not evict A's, and A's next turn hits.
func TestSideRequestDoesNotEvictTheConversation(t *testing.T) {
	c := New[string](400)
	a := ids(100, 0)
	c.Put(a[:60], "a-boundary", 100)
	c.Put(a[:80], "a-end", 100)
	b := ids(30, 1000)
	c.Put(b[:20], "b-boundary", 100)
	c.Put(b, "b-end", 100)
	if n, v, ok := c.Lookup(append(a, 7, 8)); !ok || v != "a-end" || n != 80 {
		t.Fatalf("A's next turn: %d %q %v, want the a-end hit", n, v, ok)
	}
	// One more entry must evict the least recently used: a-boundary (its
	// sibling a-end was just hit, B's entries are newer).
	c.Put(ids(10, 5000), "c", 100)
	if _, v, _ := c.Lookup(a[:70]); v == "a-boundary" {
		t.Fatal("a-boundary survived; it was the least recently used")
	}
	if _, v, _ := c.Lookup(a); v != "a-end" {
		t.Fatalf("a-end evicted (got %q) though it was the most recently used", v)
	}
	if _, v, _ := c.Lookup(b); v != "b-end" {
		t.Fatalf("b-end evicted (got %q)", v)
	}
	if s := c.Stats(); s.Bytes > 400 || s.Entries != 4 || s.Evictions != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestByteBudget(t *testing.T) {
	c := New[int](250)
	if c.Put(ids(3, 0), 1, 251) {
		t.Fatal("an entry larger than the budget was stored")
	}
	for i := range 10 {
		c.Put(ids(3, i*10), i, 100)
		if s := c.Stats(); s.Bytes > 250 {
			t.Fatalf("%d bytes held, budget 250", s.Bytes)
		}
	}
	if s := c.Stats(); s.Entries != 2 {
		t.Fatalf("%d entries, want the 2 newest", s.Entries)
	}
	// Replacing an entry keeps one copy and its new size.
	c.Put(ids(3, 90), 9, 50)
	if s := c.Stats(); s.Entries != 2 || s.Bytes != 150 {
		t.Fatalf("after replace: %+v", s)
	}
	if New[int](0).Put(ids(1, 0), 1, 1) {
		t.Fatal("a zero budget cache stored an entry")
	}
}

func TestStoredTokensAreCopied(t *testing.T) {
	c := New[int](100)
	toks := ids(4, 0)
	c.Put(toks, 1, 1)
	toks[0] = 42
	if n, _, ok := c.Lookup(ids(4, 0)); !ok || n != 4 {
		t.Fatal("the cache kept the caller's slice")
	}
}
