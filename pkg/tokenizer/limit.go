package tokenizer

import (
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// encodeChunkBytes is how much raw text EncodeLimit normalises and splits
// at a time (a variable so that tests can make chunks tiny).
var encodeChunkBytes = 64 << 10

// EncodeLimit is Encode for a caller that needs at most limit tokens (a
// server checking a prompt against its context): once the text is known
// to have more than limit tokens it stops and reports truncated, with ids
// then only a prefix of Encode's. Otherwise ids are exactly Encode(text).
// The work is bounded by what limit needs, not by the length of text: the
// text is normalised and pre-tokenized a chunk at a time, a piece is
// encoded only once no later text can change it, and a stretch too long
// to fit in the tokens left (each token is at most maxTokenBytes bytes)
// ends the count without being encoded.
func (t *Tokenizer) EncodeLimit(text string, limit int) (ids []int, truncated bool) {
	if !utf8.ValidString(text) {
		text = lossyString([]byte(text))
	}
	e := limitEncoder{t: t, limit: max(limit, 0)}
	e.ids = make([]int, 0, min(len(text)/3+1, e.limit+1))
	t.rawAdded.splitUntil(text, e.segment, e.added)
	return e.ids, e.over
}

type limitEncoder struct {
	t     *Tokenizer
	ids   []int
	limit int
	over  bool
}

func (e *limitEncoder) added(id int32) bool {
	e.ids = append(e.ids, int(id))
	return e.fits(0)
}

// fits reports whether the ids so far plus at least the tokens of n more
// bytes stay within the limit, and records when they do not.
func (e *limitEncoder) fits(n int) bool {
	least := 0
	if n > 0 {
		least = (n + e.t.maxTokenBytes - 1) / max(e.t.maxTokenBytes, 1)
	}
	if len(e.ids)+least > e.limit {
		e.over = true
	}
	return !e.over
}

// segment encodes a stretch between raw added tokens.
func (e *limitEncoder) segment(seg string) bool {
	if !e.t.nfc || e.t.normalizedAdded.any {
		// Normalised added tokens are matched on the whole normalised
		// stretch; such tokenizers are rare, so they take the plain path.
		if e.t.nfc {
			seg = norm.NFC.String(seg)
		}
		ok := true
		e.t.normalizedAdded.splitUntil(seg, func(plain string) bool {
			_, ok = e.pieces(plain, true)
			return ok
		}, e.added)
		return ok && !e.over
	}
	var pending string // normalised text whose last pieces may still grow
	chunk := encodeChunkBytes
	for rest := seg; ; {
		part := rest
		if len(rest) > chunk {
			part = rest[:nfcCut(rest, chunk)]
		}
		rest = rest[len(part):]
		pending += norm.NFC.String(part)
		var ok bool
		if pending, ok = e.pieces(pending, rest == ""); !ok {
			return false
		}
		if rest == "" {
			return true
		}
		// A piece longer than a chunk (one long word) must not be
		// rescanned chunk after chunk: the next chunk is at least as long
		// as what waits, so the work stays linear.
		chunk = max(encodeChunkBytes, len(pending))
	}
}

// nfcCut returns where to end a chunk of about n bytes of s (len(s) > n):
// the last normalisation boundary at or before n, so that NFC of the parts
// is NFC of the whole; len(s) when the first n bytes have none.
func nfcCut(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if i := norm.NFC.LastBoundary([]byte(s[:n])); i > 0 {
		return i
	}
	return len(s)
}

// pieces encodes the pieces of s; unless atEnd it stops before the first
// piece that text after s could still change, and returns the rest.
func (e *limitEncoder) pieces(s string, atEnd bool) (string, bool) {
	i := 0
	for i < len(s) {
		n := pieceLen(s[i:])
		if !atEnd && !pieceIsFinal(s, i, n) {
			break
		}
		if !e.fits(n) {
			return "", false
		}
		e.ids = e.t.appendPiece(e.ids, s[i:i+n])
		if !e.fits(0) {
			return "", false
		}
		i += n
	}
	if !e.fits(len(s) - i) {
		return "", false
	}
	return s[i:], true
}

// pieceIsFinal reports whether the piece s[i:i+n] is the piece splitPieces
// finds at i however s continues. Each rule of pieceLen ends its piece at
// a character that does not belong to it, so a piece followed by a
// character of s is final, except a run of white space (rules 5–7): its
// piece depends on where the run ends and whether a CR/LF is in it, so the
// run must end within s.
func pieceIsFinal(s string, i, n int) bool {
	if i+n >= len(s) {
		return false
	}
	if runLen(s[i:i+n], unicode.IsSpace) < n {
		return true
	}
	return i+runLen(s[i:], unicode.IsSpace) < len(s)
}
