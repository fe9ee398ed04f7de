package tokenizer

import (
	"cmp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	special    bool
	normalized bool
	lstrip     bool // the match takes white space before it
	rstrip     bool // the match takes white space after it
	singleWord bool // matches only when not inside a word
}

// addedMatcher finds added tokens in text, leftmost-longest as the
// tokenizers library's Aho-Corasick automaton (MatchKind::LeftmostLongest)
// does. Added-token lists are short (tens of entries), so an index by first
// byte with candidates longest first is as fast and much simpler.
type addedMatcher struct {
	byFirstByte [256][]addedToken
	any         bool
}

func newAddedMatcher(tokens []addedToken) addedMatcher {
	var m addedMatcher
	for _, a := range tokens {
		m.byFirstByte[a.content[0]] = append(m.byFirstByte[a.content[0]], a)
		m.any = true
	}
	for i := range m.byFirstByte {
		slices.SortStableFunc(m.byFirstByte[i], func(a, b addedToken) int {
			return cmp.Compare(len(b.content), len(a.content))
		})
	}
	return m
}

// longestAt returns the longest added token that s starts with.
func (m *addedMatcher) longestAt(s string) (addedToken, bool) {
	for _, a := range m.byFirstByte[s[0]] {
		if strings.HasPrefix(s, a.content) {
			return a, true
		}
	}
	return addedToken{}, false
}

// split walks s, calling onText for each stretch between matches and
// onToken for each match, following the tokenizers library's
// AddedVocabulary.find_matches: a single_word token inside a word is not a
// match (and the scan resumes after it, as the automaton does); lstrip and
// rstrip widen the match over adjacent white space, which then disappears
// into the token. One deliberate difference: after an rstrip match the scan
// resumes past the white space it took, where the library could report an
// overlapping match for a token that itself begins with white space.
func (m *addedMatcher) split(s string, onText func(string), onToken func(int32)) {
	m.splitUntil(s, func(text string) bool { onText(text); return true }, func(id int32) bool { onToken(id); return true })
}

// splitUntil is split that stops as soon as a callback returns false.
func (m *addedMatcher) splitUntil(s string, onText func(string) bool, onToken func(int32) bool) {
	if !m.any {
		onText(s)
		return
	}
	textStart := 0
	for i := 0; i < len(s); {
		a, ok := m.longestAt(s[i:])
		if !ok {
			i++ // contents are valid UTF-8, so matches start at rune boundaries
			continue
		}
		start, end := i, i+len(a.content)
		if a.singleWord && !standsAlone(s, start, end) {
			i = end
			continue
		}
		if a.lstrip {
			start = max(textStart, start-trailingSpaceLen(s[:start]))
		}
		if a.rstrip {
			end += leadingSpaceLen(s[end:])
		}
		if textStart < start && !onText(s[textStart:start]) {
			return
		}
		if !onToken(a.id) {
			return
		}
		textStart, i = end, end
	}
	if textStart < len(s) {
		onText(s[textStart:])
	}
}

// standsAlone reports whether s[start:end] has no word character (regex \w)
// right before or after it.
func standsAlone(s string, start, end int) bool {
	before, _ := utf8.DecodeLastRuneInString(s[:start])
	after, _ := utf8.DecodeRuneInString(s[end:])
	return (start == 0 || !isWordChar(before)) && (end == len(s) || !isWordChar(after))
}

// isWordChar is the Unicode \w of Rust's regex crate: Alphabetic, marks,
// decimal digits, connector punctuation and the joiners.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.IsDigit(r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Join_Control, r)
}

func trailingSpaceLen(s string) int {
	n := len(s)
	for n > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:n])
		if !unicode.IsSpace(r) {
			break
		}
		n -= size
	}
	return len(s) - n
}

func leadingSpaceLen(s string) int {
	return runLen(s, unicode.IsSpace)
}

// Encode returns the token ids of text, with no BOS or EOS added (Qwen's
// post-processor adds none) and added tokens in the text, special ones
// included, matched as tokens. Invalid UTF-8 in text is first replaced by
// U+FFFD, as Python does when bytes are decoded with errors="replace".
func (t *Tokenizer) Encode(text string) []int {
	if !utf8.ValidString(text) {
		text = lossyString([]byte(text))
	}
	ids := make([]int, 0, len(text)/3+1)
	appendID := func(id int32) { ids = append(ids, int(id)) }
	t.rawAdded.split(text, func(segment string) {
		if t.nfc {
			segment = norm.NFC.String(segment)
		}
		t.normalizedAdded.split(segment, func(plain string) {
			splitPieces(plain, func(piece string) {
				ids = t.appendPiece(ids, piece)
			})
		}, appendID)
	}, appendID)
	return ids
}

// appendPiece appends the ids of one pre-tokenized piece.
func (t *Tokenizer) appendPiece(dst []int, piece string) []int {
	if len(piece) == 1 {
		return append(dst, int(t.bpe.byteIDs[piece[0]]))
	}
	ids, ok := t.cache.get(piece)
	if !ok {
		ids = t.bpe.encodePiece(piece)
		t.cache.put(piece, ids)
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst
}

// encodePiece maps the bytes of piece to their symbols' ids and merges them.
func (m *bpeModel) encodePiece(piece string) []int32 {
	if m.ignoreMerges {
		if id, ok := m.vocab[symbolString(piece)]; ok {
			return []int32{id}
		}
	}
	byteIDs := make([]int32, len(piece))
	for i := 0; i < len(piece); i++ {
		byteIDs[i] = m.byteIDs[piece[i]]
	}
	return m.mergePiece(make([]int32, 0, len(piece)), byteIDs)
}

// symbolString is the ByteLevel form of s: each byte as its symbol.
func symbolString(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteToSymbol[s[i]])
	}
	return b.String()
}
