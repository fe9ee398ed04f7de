package jsonconstrain

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestApplyMatchesAllows checks the word-at-a-time Apply against the
// definition, one Allows per logit, for rows shorter than, equal to and
// longer than the mask, at every tail length.
func TestApplyMatchesAllows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	inf := float32(math.Inf(-1))
	for _, words := range []int{0, 1, 2, 3, 8} {
		for n := 0; n <= words*64+70; n++ {
			mk := Mask{bits: make([]uint64, words)}
			for i := range mk.bits {
				switch rng.IntN(4) {
				case 0:
					mk.bits[i] = ^uint64(0)
				case 1:
					mk.bits[i] = rng.Uint64()
				case 2:
					mk.bits[i] = 1<<rng.IntN(64) | 1<<rng.IntN(64)
				}
			}
			logits := make([]float32, n)
			for i := range logits {
				logits[i] = float32(i)
			}
			mk.Apply(logits)
			for i, l := range logits {
				want := float32(i)
				if !mk.Allows(i) {
					want = inf
				}
				if l != want {
					t.Fatalf("words %d n %d: logit %d = %v, want %v", words, n, i, l, want)
				}
			}
		}
	}
}

// allowedIDs runs one Mask step and returns the ids left finite.
func allowedIDs(c *Constraint, vocab int) (ids []int, count int) {
	logits := make([]float32, vocab)
	count = c.Mask(logits)
	for id, l := range logits {
		if !math.IsInf(float64(l), -1) {
			ids = append(ids, id)
		}
	}
	return ids, count
}

func TestConstraintEndsOnlyWhenComplete(t *testing.T) {
	m, ends := fixtureMasker(t)
	tok := fixtureTokenizer(t)
	vocab := tok.IDCount()
	c := m.Constrain(mustCompile(t, personSchema))
	ids, n := allowedIDs(c, vocab)
	if n != len(ids) || n == 0 || slices.ContainsFunc(ends, func(id int) bool { return slices.Contains(ids, id) }) {
		t.Fatalf("before the document: %d allowed (count %d), end tokens among them: %v", len(ids), n, ids)
	}
	for _, id := range tok.Encode(`{"name":"Al","age":7}`) {
		if _, n := allowedIDs(c, vocab); n == 0 {
			t.Fatal("dead end inside the document")
		}
		if ended, err := c.Advance(id); ended || err != nil {
			t.Fatalf("advance %d: %v %v", id, ended, err)
		}
	}
	if !c.Done() {
		t.Fatal("document not done")
	}
	ids, n = allowedIDs(c, vocab)
	if !slices.Equal(ids, slices.Sorted(slices.Values(ends))) || n != len(ends) {
		t.Fatalf("after a closed document %v allowed (count %d), want only the end tokens %v", ids, n, ends)
	}
	if ended, err := c.Advance(ends[0]); !ended || err != nil {
		t.Fatalf("end token: %v %v", ended, err)
	}
}

// A top-level number is complete but may still grow: digits stay allowed
// next to the end tokens.
func TestConstraintTopLevelNumberCanGrow(t *testing.T) {
	m, ends := fixtureMasker(t)
	tok := fixtureTokenizer(t)
	c := m.Constrain(mustCompile(t, `{"type":"integer"}`))
	for _, id := range tok.Encode("12") {
		c.Mask(make([]float32, tok.IDCount()))
		if _, err := c.Advance(id); err != nil {
			t.Fatal(err)
		}
	}
	ids, _ := allowedIDs(c, tok.IDCount())
	three := tok.Encode("3")
	for _, want := range append(slices.Clone(ends), three...) {
		if !slices.Contains(ids, want) {
			t.Fatalf("after 12: id %d not allowed", want)
		}
	}
}

// With no end token to finish a closed document, the mask leaves nothing
// and says so.
func TestConstraintDeadEnd(t *testing.T) {
	v := &synthVocab{toks: [][]byte{[]byte("{"), []byte("}"), []byte(" ")}}
	m, err := NewMasker(v, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := m.Constrain(ObjectMode(DefaultOptions))
	for _, id := range []int{0, 1} {
		if _, n := allowedIDs(c, 3); n == 0 {
			t.Fatalf("dead end before token %d", id)
		}
		if _, err := c.Advance(id); err != nil {
			t.Fatal(err)
		}
	}
	if ids, n := allowedIDs(c, 5); n != 0 || len(ids) != 0 {
		t.Fatalf("closed document with no end token: %v allowed (count %d), want none", ids, n)
	}
}
