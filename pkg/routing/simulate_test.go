package routing

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func mustParse(t *testing.T, in string, g Geometry) *Trace {
	t.Helper()
	tr, err := Parse(strings.NewReader(in), g)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestSimulateByHand(t *testing.T) {
	g := Geometry{Layers: 1, Experts: 8, TopK: 2}
	// Uses: {0 1} {2 3} {0 1} {4 0} with 4 slots.
	tr := mustParse(t, "0 0 0 1\n1 0 2 3\n2 0 0 1\n3 0 4 0\n", g)
	lru := SimulateLRU(tr, 4)
	// LRU: miss 0 1 2 3, hit 0 1, miss 4 (evicts 2), hit 0.
	if lru.Hits != 3 || lru.Accesses != 8 || lru.NewPerLayerToken != 5.0/4 {
		t.Fatalf("LRU %+v, want 3 hits of 8 and 1.25 new per layer per token", lru)
	}
	// With 2 slots LRU hits nothing: 4 evicts 0, used just before 1.
	if s := SimulateLRU(tr, 2); s.Hits != 0 {
		t.Fatalf("LRU-2 hits %d, want 0", s.Hits)
	}
	// Belady-2: 2 and 3 must replace 0 and 1, which come back as misses;
	// then 4 evicts 1 (never used again), so 0 hits.
	if s := SimulateBelady(tr, 2); s.Hits != 1 {
		t.Fatalf("Belady-2 hits %d, want 1", s.Hits)
	}
	// Belady-3 keeps one of 0 and 1 through token 1 (2 and 3 take the
	// rest), then keeps 0 for token 3: 2 hits, where LRU-3 gets 1.
	if s, l := SimulateBelady(tr, 3), SimulateLRU(tr, 3); s.Hits != 2 || l.Hits != 1 {
		t.Fatalf("Belady-3 hits %d, LRU-3 %d; want 2 and 1", s.Hits, l.Hits)
	}
	if s := SimulateBelady(tr, 4); s.Hits != 3 {
		t.Fatalf("Belady-4 hits %d, want 3", s.Hits)
	}
	if s := SimulateBelady(tr, 8); s.Hits != 3 || s.LayerMin != s.LayerMax {
		t.Fatalf("Belady-8 %+v", s)
	}
}

// Belady's optimum never hits less than LRU, and neither hits more than
// every non-first use.
func TestBeladyAtLeastLRU(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range 60 {
		g := Geometry{Layers: 1 + rng.IntN(3), Experts: 4 + rng.IntN(60), TopK: 1}
		g.TopK = 1 + rng.IntN(min(g.Experts, 10))
		regime := Regimes[i%len(Regimes)]
		tr, err := Generate(g, regime, 20+rng.IntN(200), rng.Uint64())
		if err != nil {
			t.Fatal(err)
		}
		distinctFirstUses := int64(0)
		for l := range g.Layers {
			seen := map[int32]bool{}
			for tok := range tr.Tokens() {
				for _, e := range tr.Row(tok, l) {
					if !seen[e] {
						seen[e] = true
						distinctFirstUses++
					}
				}
			}
		}
		for _, slots := range []int{g.TopK, g.TopK + 1, (g.TopK + g.Experts) / 2, g.Experts} {
			lru, opt := SimulateLRU(tr, slots), SimulateBelady(tr, slots)
			if opt.Hits < lru.Hits {
				t.Fatalf("%v %s %d tokens, %d slots: Belady %d hits < LRU %d", g, regime, tr.Tokens(), slots, opt.Hits, lru.Hits)
			}
			if limit := lru.Accesses - distinctFirstUses; opt.Hits > limit {
				t.Fatalf("Belady %d hits > %d reuses", opt.Hits, limit)
			}
			if slots == g.Experts && (opt.Hits != lru.Hits || opt.Hits != lru.Accesses-distinctFirstUses) {
				t.Fatalf("all resident: Belady %d LRU %d, want both %d", opt.Hits, lru.Hits, lru.Accesses-distinctFirstUses)
			}
		}
	}
}

// Counting from a position: the by-hand trace's hits after its first two
// tokens, and for generated traces, a from-N count plus the hits of the
// first N tokens alone equals the whole trace's count (LRU is causal).
func TestSimulateFrom(t *testing.T) {
	g := Geometry{Layers: 1, Experts: 8, TopK: 2}
	tr := mustParse(t, "0 0 0 1\n1 0 2 3\n2 0 0 1\n3 0 4 0\n", g)
	// LRU-4 from token 2: hit 0 1, miss 4, hit 0 = 3 of 4; 1 new per layer per token.
	if s := SimulateLRUFrom(tr, 4, 2); s.Hits != 3 || s.Accesses != 4 || s.NewPerLayerToken != 0.5 {
		t.Fatalf("LRU-4 from 2: %+v", s)
	}
	// Belady-3 from token 2: it still keeps 0 through token 1 and 3: 2 hits of 4.
	if s := SimulateBeladyFrom(tr, 3, 2); s.Hits != 2 || s.Accesses != 4 {
		t.Fatalf("Belady-3 from 2: %+v", s)
	}
	if s := SimulateLRUFrom(tr, 4, 9); s.Accesses != 0 || s.HitRate != 0 {
		t.Fatalf("from past the end: %+v", s)
	}
	g = Geometry{Layers: 3, Experts: 64, TopK: 4}
	full, err := Generate(g, Agent, 200, 7)
	if err != nil {
		t.Fatal(err)
	}
	head, err := Generate(g, Agent, 50, 7)
	if err != nil {
		t.Fatal(err)
	}
	for _, slots := range []int{4, 16, 40} {
		if a, b, c := SimulateLRU(full, slots), SimulateLRU(head, slots), SimulateLRUFrom(full, slots, 50); a.Hits != b.Hits+c.Hits || c.Accesses != a.Accesses-b.Accesses {
			t.Fatalf("slots %d: LRU whole %d hits, first 50 tokens %d, from 50 %d", slots, a.Hits, b.Hits, c.Hits)
		}
		if o, l := SimulateBeladyFrom(full, slots, 50), SimulateLRUFrom(full, slots, 50); o.Hits < l.Hits {
			t.Fatalf("slots %d: Belady from 50 %d < LRU %d", slots, o.Hits, l.Hits)
		}
	}
}
