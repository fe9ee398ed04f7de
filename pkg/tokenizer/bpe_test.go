package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixtureMerges reads the fixture's vocabulary and merge ranks straight from
// tokenizer.json, independently of Parse.
func fixtureMerges(tb testing.TB) (vocab map[string]int, ranks map[[2]string]int) {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(fixturesDir(tb), "tiny-moe-fused", "tokenizer.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var doc struct {
		Model struct {
			Vocab  map[string]int `json:"vocab"`
			Merges [][2]string    `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		tb.Fatal(err)
	}
	ranks = make(map[[2]string]int, len(doc.Model.Merges))
	for i, m := range doc.Model.Merges {
		ranks[m] = i // a repeated pair keeps its last rank, as in the tokenizers library
	}
	return doc.Model.Vocab, ranks
}

// naiveBPE is the definition of §5 step 5 written as plainly as possible, on
// strings: merge the adjacent pair of lowest rank, leftmost among equals,
// until none has a rank.
func naiveBPE(ranks map[[2]string]int, piece string) []string {
	var syms []string
	for i := 0; i < len(piece); i++ {
		syms = append(syms, string(byteToSymbol[piece[i]]))
	}
	for {
		best, bestRank := -1, 0
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < bestRank) {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return syms
		}
		syms = slices.Replace(syms, best, best+2, syms[best]+syms[best+1])
	}
}

// TestMergePieceMatchesDefinition compares the heap-based merge with the
// plain definition on many pieces: every piece of the reference prompts, and
// random strings over the letters the fixture vocabulary merges most.
func TestMergePieceMatchesDefinition(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	vocab, ranks := fixtureMerges(t)
	var inputs []string
	var refs refsFile
	readFixtureJSON(t, "tiny-moe.refs.json", &refs)
	for _, p := range refs.Prompts {
		splitPieces(p.Text, func(piece string) { inputs = append(inputs, piece) })
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "  eeettaaoinsrhldcumfpgwybvkxjqz_.,()=\n"
	for range 3000 {
		n := 1 + rng.IntN(40)
		var b strings.Builder
		for range n {
			b.WriteByte(letters[rng.IntN(len(letters))])
		}
		inputs = append(inputs, b.String())
	}
	// Runs of one letter exercise equal ranks (leftmost must win).
	for n := 1; n <= 33; n++ {
		inputs = append(inputs, strings.Repeat("e", n), strings.Repeat(" ", n), strings.Repeat("=", n))
	}
	for _, in := range inputs {
		var want []int
		for _, s := range naiveBPE(ranks, in) {
			want = append(want, vocab[s])
		}
		var got []int
		for _, id := range tok.bpe.encodePiece(in) {
			got = append(got, int(id))
		}
		if !slices.Equal(got, want) {
			t.Errorf("merge %q\n got %v\nwant %v", in, got, want)
		}
	}
}

// TestLongPiece: a whole page of CJK text without punctuation is one piece;
// encoding it must stay fast and lossless.
func TestLongPiece(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-moe-fused")
	vocab, ranks := fixtureMerges(t)
	long := strings.Repeat("the", 700) // one letter run, merged many times
	var want []int
	for _, s := range naiveBPE(ranks, long) {
		want = append(want, vocab[s])
	}
	if got := tok.Encode(long); !slices.Equal(got, want) {
		t.Errorf("Encode of a 2100-letter run differs from the definition")
	}

	cjk := strings.Repeat("你好世界汉字", 20000) // 120k characters, 360 KB
	start := time.Now()
	ids := tok.Encode(cjk)
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Errorf("encoding one 360 KB piece took %v", elapsed)
	}
	if got := tok.Decode(ids); got != cjk {
		t.Error("long CJK piece does not round-trip")
	}
}
