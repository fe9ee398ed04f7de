package jsonconstrain

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixtok"
	"github.com/nvmai/nvmai/pkg/tokenizer"
)

func fixtureTokenizer(t testing.TB) *tokenizer.Tokenizer { return fixtok.Tokenizer(t) }

// walkFixture is what the random-walk tests share: the fixture masker and
// tokenizer, its end ids, and how many walks to take (short under -short
// or the race detector, which slows the walks an order of magnitude, else
// full; scripts/test.sh runs the full walks without -race).
func walkFixture(t *testing.T, full, short int) (*Masker, *tokenizer.Tokenizer, map[int]bool, int) {
	m, ends := fixtureMasker(t)
	walks := full
	if testfix.Quick(raceEnabled) {
		walks = short
	}
	return m, fixtureTokenizer(t), map[int]bool{ends[0]: true, ends[1]: true}, walks
}

// fixtureMasker masks the fixture vocabulary with <|im_end|> and
// <|endoftext|> as end tokens.
func fixtureMasker(t testing.TB) (*Masker, []int) {
	tok := fixtureTokenizer(t)
	ends := fixtok.Ends(t, tok)
	m, err := NewMasker(tok, ends)
	if err != nil {
		t.Fatal(err)
	}
	return m, ends
}

// synthVocab is a Vocabulary of given byte strings; ids listed in special
// are special tokens.
type synthVocab struct {
	toks    [][]byte
	special map[int]bool
}

func (v *synthVocab) IDCount() int             { return len(v.toks) }
func (v *synthVocab) TokenBytes(id int) []byte { return v.toks[id] }
func (v *synthVocab) IsSpecial(id int) bool    { return v.special[id] }

// allowedNaive is the mask by definition: every token whose bytes a clone
// of st accepts.
func allowedNaive(v Vocabulary, st *State, ends map[int]bool) map[int]bool {
	out := map[int]bool{}
	for id := 0; id < v.IDCount(); id++ {
		if ends[id] {
			if st.Done() {
				out[id] = true
			}
			continue
		}
		if v.IsSpecial(id) || len(v.TokenBytes(id)) == 0 {
			continue
		}
		if st.Clone().AcceptBytes(v.TokenBytes(id)) {
			out[id] = true
		}
	}
	return out
}

func TestMaskMatchesNaive(t *testing.T) {
	v := &synthVocab{toks: [][]byte{
		[]byte("{"), []byte(`{"`), []byte(`{"name":"`), []byte(`"`), []byte(`":`), []byte("a"), []byte("ab"),
		[]byte("age"), []byte(`age":`), []byte("1"), []byte("12"), []byte(","), []byte("}"), []byte(" "),
		[]byte("  "), []byte("<s>"), {}, []byte("é"), {0xC3}, {0xA9}, []byte(`"}`), []byte("null"), []byte("<end>"),
	}, special: map[int]bool{15: true, 22: true}}
	m, err := NewMasker(v, []int{22})
	if err != nil {
		t.Fatal(err)
	}
	var mk Mask
	for _, schema := range []string{"", personSchema} {
		for _, prefix := range []string{"", "{", `{"`, `{"name":"`, `{"name":"é`, "{\"name\":\"\xC3", `{"name":"ab"`, `{"name":"ab","age":1`, `{"name":"ab","age":1}`} {
			st := mustCompile(t, schema).Start()
			if !st.AcceptBytes([]byte(prefix)) {
				continue
			}
			m.Allowed(st, &mk)
			want := allowedNaive(v, st, map[int]bool{22: true})
			for id := range v.toks {
				if mk.Allows(id) != want[id] {
					t.Errorf("schema %q prefix %q: token %d (%q) allowed=%v, want %v", schema, prefix, id, v.toks[id], mk.Allows(id), want[id])
				}
			}
			if mk.Count() != len(want) {
				t.Errorf("prefix %q: Count %d, want %d", prefix, mk.Count(), len(want))
			}
		}
	}
}

func TestApply(t *testing.T) {
	v := &synthVocab{toks: [][]byte{[]byte("{"), []byte("x"), []byte("}")}}
	m, _ := NewMasker(v, nil)
	var mk Mask
	m.Allowed(mustCompile(t, "").Start(), &mk)
	logits := []float32{1, 2, 3, 4, 5} // two padding rows past the vocabulary
	mk.Apply(logits)
	inf := float32(math.Inf(-1))
	want := []float32{1, inf, inf, inf, inf}
	for i := range want {
		if logits[i] != want[i] {
			t.Fatalf("logits %v, want %v", logits, want)
		}
	}
}

func TestNewMaskerRefusesBadEndID(t *testing.T) {
	if _, err := NewMasker(&synthVocab{toks: [][]byte{[]byte("a")}}, []int{5}); err == nil {
		t.Fatal("end id outside the vocabulary accepted")
	}
}

func TestMaskerAccept(t *testing.T) {
	m, ends := fixtureMasker(t)
	tok := fixtureTokenizer(t)
	st := mustCompile(t, "").Start()
	if _, err := m.Accept(st, ends[0]); err == nil {
		t.Fatal("end token accepted before the document")
	}
	start, _ := tok.TokenID("<|im_start|>")
	if _, err := m.Accept(st, start); err == nil {
		t.Fatal("special token accepted")
	}
	const text = `{"a": [1, "xé"]}`
	var joined []byte
	for _, id := range tok.Encode(text) {
		joined = append(joined, tok.TokenBytes(id)...)
		if _, err := m.Accept(st, id); err != nil {
			t.Fatal(err)
		}
	}
	if string(joined) != text || tok.TokenBytes(-1) != nil || tok.TokenBytes(tok.IDCount()) != nil {
		t.Fatalf("TokenBytes of the encoding is %q, want %q; out-of-range ids must give nil", joined, text)
	}
	if ended, err := m.Accept(st, ends[1]); !ended || err != nil {
		t.Fatalf("end after the document: %v %v", ended, err)
	}
}

// smallOptions keep random documents short, so walks end quickly.
var smallOptions = Options{
	MaxDepth: 3, MaxStringChars: 6, MaxKeyBytes: 6, MaxItems: 3, MaxExtraProperties: 2,
	MaxNumberBytes: 6, MaxWhitespace: 2, MaxSchemaBytes: 1 << 16, MaxSchemaNodes: 256,
	MaxEnumValues: 16, MaxEnumBytes: 64, MaxObjectProperties: 64,
}

var walkSchemas = []string{
	"",
	personSchema,
	`{"type":"array","items":{"anyOf":[{"type":"string","minLength":2},{"type":"number"},{"type":"null"}]},"minItems":1}`,
	`{"properties":{"a":{"properties":{"b":{"type":"boolean"}},"required":["b"]},"z":{"const":"é😀"}},"required":["a","z"]}`,
	`{"type":["integer","string"],"maxLength":3}`,
}

// TestRandomWalks samples uniformly among the allowed tokens of the fixture
// vocabulary at every step: every walk must reach an end token within a
// bound, never meet a state with nothing allowed, and leave a document
// that parses and validates. Every tenth step the mask is checked against
// the naive definition.
func TestRandomWalks(t *testing.T) {
	m, tok, endSet, walks := walkFixture(t, 40, 5)
	for si, schemaJSON := range walkSchemas {
		s := ObjectMode(smallOptions)
		if schemaJSON != "" {
			var err error
			if s, err = CompileWithOptions([]byte(schemaJSON), smallOptions); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(si), 1))
		for w := 0; w < walks; w++ {
			doc := randomWalk(t, m, tok, s, rng, endSet, w%4 == 0)
			if w < 2 {
				t.Logf("schema %d walk %d: %s", si, w, doc)
			}
			checkDocument(t, schemaJSON, doc)
		}
	}
}

func randomWalk(t *testing.T, m *Masker, v Vocabulary, s *Schema, rng *rand.Rand, ends map[int]bool, crossCheck bool) []byte {
	const maxSteps = 5000
	doc, ok := walkSteps(t, m, v, s, rng, ends, crossCheck, maxSteps)
	if !ok {
		t.Fatalf("walk did not end within %d steps: %q", maxSteps, doc)
	}
	return doc
}

// walkSteps is randomWalk that reports, rather than fails, a walk that has
// not ended after maxSteps.
func walkSteps(t *testing.T, m *Masker, v Vocabulary, s *Schema, rng *rand.Rand, ends map[int]bool, crossCheck bool, maxSteps int) ([]byte, bool) {
	st := s.Start()
	var mk Mask
	var doc []byte
	var ids []int
	for step := 0; step < maxSteps; step++ {
		m.Allowed(st, &mk)
		if crossCheck && step%10 == 0 {
			want := allowedNaive(v, st, ends)
			if mk.Count() != len(want) {
				t.Fatalf("after %q: mask has %d tokens, naive %d", doc, mk.Count(), len(want))
			}
		}
		ids = ids[:0]
		endAllowed := false
		for id := 0; id < v.IDCount(); id++ {
			if !mk.Allows(id) {
				continue
			}
			if ends[id] {
				endAllowed = true
			} else {
				ids = append(ids, id)
			}
		}
		if !endAllowed && len(ids) == 0 {
			t.Fatalf("dead end after %q", doc)
		}
		if endAllowed && (len(ids) == 0 || rng.IntN(4) == 0) {
			if !st.Done() {
				t.Fatalf("end allowed before %q is complete", doc)
			}
			return doc, true
		}
		id := ids[rng.IntN(len(ids))]
		if _, err := m.Accept(st, id); err != nil {
			t.Fatalf("after %q: allowed token refused: %v", doc, err)
		}
		doc = append(doc, v.TokenBytes(id)...)
		if !utf8.Valid(doc) && st.Done() {
			t.Fatalf("done with invalid UTF-8 %q", doc)
		}
	}
	return doc, false
}

// One Masker serves many generations at once, each with its own State and
// Mask (run with -race).
func TestMaskerConcurrentUse(t *testing.T) {
	m, _ := fixtureMasker(t)
	s := mustCompile(t, personSchema)
	var want Mask
	ref := s.Start()
	ref.AcceptBytes([]byte(`{"name":"A`))
	m.Allowed(ref, &want)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mk Mask
			for i := 0; i < 20; i++ {
				st := s.Start()
				st.AcceptBytes([]byte(`{"name":"A`))
				m.Allowed(st, &mk)
				if mk.Count() != want.Count() {
					t.Errorf("concurrent mask has %d tokens, want %d", mk.Count(), want.Count())
					return
				}
			}
		}()
	}
	wg.Wait()
}

// The tightest options still leave a document to write, and walks find it.
func TestTightOptionsWalk(t *testing.T) {
	m, ends := fixtureMasker(t)
	tok := fixtureTokenizer(t)
	endSet := map[int]bool{ends[0]: true, ends[1]: true}
	tight := Options{MaxSchemaBytes: 1 << 10, MaxSchemaNodes: 8, MaxEnumValues: 1, MaxEnumBytes: 8}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, schemaJSON := range []string{"", `{"type":"integer"}`, `{"type":"string"}`, `{"type":"array"}`, `{"type":"object"}`, `{}`} {
		s := ObjectMode(tight)
		if schemaJSON != "" {
			var err error
			if s, err = CompileWithOptions([]byte(schemaJSON), tight); err != nil {
				t.Fatal(err)
			}
		}
		for w := 0; w < 5; w++ {
			checkDocument(t, schemaJSON, randomWalk(t, m, tok, s, rng, endSet, true))
		}
	}
}
