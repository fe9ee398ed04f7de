package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// qwenSplitPattern is the Split pre-tokenizer regex of Qwen3.5's
// tokenizer.json. splitPieces implements exactly this pattern by hand: Go's
// RE2 has no look-ahead (`(?!\S)`) and its `\s` is ASCII-only, while the
// tokenizers library (Oniguruma) uses Unicode White_Space.
//
// Checked against Oniguruma 6.9.8 itself on 200,000 random strings (letters,
// marks, digits, CJK, emoji, ASCII and Unicode spaces, CR/LF, apostrophes
// with every case of s/t/re/ve/m/ll/d and U+017F): no difference. The only
// differences seen over random BMP code points came from characters new in
// Unicode 15 (Go's tables) that the library's older tables leave unassigned.
const qwenSplitPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// contractions are the suffixes of the first alternative, in the order the
// regex tries them.
var contractions = [...]string{"s", "t", "re", "ve", "m", "ll", "d"}

func isLetterOrMark(r rune) bool {
	if r < utf8.RuneSelf {
		lower := r | 0x20 // ASCII fast path: most text is ASCII
		return lower >= 'a' && lower <= 'z'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r)
}

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// isOther is `[^\s\p{L}\p{M}\p{N}]`: punctuation, symbols, controls that are
// not white space, and so on.
func isOther(r rune) bool {
	return !unicode.IsSpace(r) && !isLetterOrMark(r) && !unicode.IsNumber(r)
}

// splitPieces calls yield with each piece of s, in order; the pieces tile s.
// At each position the first of these rules that applies gives the piece
// (qwen35-architecture.md §5):
//
//  1. ' followed case-insensitively by s, t, re, ve, m, ll or d.
//  2. A letter or mark, or one character that is not CR, LF, a letter or a
//     number followed by a letter or mark: that character and the run of
//     letters and marks after it.
//  3. One number character.
//  4. An optional U+0020, then a run of characters that are not white space,
//     letters, marks or numbers, then any run of CR/LF.
//  5. A white-space run that holds CR or LF: up to its last CR/LF.
//  6. A white-space run at the end of s, or of one character: all of it.
//  7. Otherwise the run minus its last character, which begins the next piece.
func splitPieces(s string, yield func(piece string)) {
	for i := 0; i < len(s); {
		n := pieceLen(s[i:])
		yield(s[i : i+n])
		i += n
	}
}

// pieceLen returns the length in bytes of the piece at the front of s
// (len(s) > 0).
func pieceLen(s string) int {
	first, firstLen := utf8.DecodeRuneInString(s)
	if n := contractionLen(s); n > 0 {
		return n
	}
	if n := letterRunLen(s, first, firstLen); n > 0 {
		return n
	}
	if unicode.IsNumber(first) {
		return firstLen
	}
	if n := otherRunLen(s, first, firstLen); n > 0 {
		return n
	}
	return spaceRunPieceLen(s)
}

// contractionLen is rule 1. The regex's (?i) folds case the Unicode way, so
// "'ſ" (U+017F, which folds to 's') counts as well as "'S".
func contractionLen(s string) int {
	if s[0] != '\'' {
		return 0
	}
	rest := s[1:]
	for _, c := range contractions {
		if n := foldedPrefixLen(rest, c); n > 0 {
			return 1 + n
		}
	}
	return 0
}

// foldedPrefixLen returns the byte length of the prefix of s that equals the
// ASCII string lower under simple case folding, or 0 if there is none.
func foldedPrefixLen(s, lower string) int {
	n := 0
	for i := 0; i < len(lower); i++ {
		if n >= len(s) {
			return 0
		}
		r, size := utf8.DecodeRuneInString(s[n:])
		if !equalFoldRune(r, rune(lower[i])) {
			return 0
		}
		n += size
	}
	return n
}

// equalFoldRune reports whether r and want are in the same simple
// case-folding orbit (as strings.EqualFold compares characters).
func equalFoldRune(r, want rune) bool {
	if r == want {
		return true
	}
	for f := unicode.SimpleFold(want); f != want; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// letterRunLen is rule 2.
func letterRunLen(s string, first rune, firstLen int) int {
	if !isLetterOrMark(first) {
		if first == '\r' || first == '\n' || unicode.IsNumber(first) || firstLen >= len(s) {
			return 0
		}
		if second, _ := utf8.DecodeRuneInString(s[firstLen:]); !isLetterOrMark(second) {
			return 0
		}
	}
	return firstLen + runLen(s[firstLen:], isLetterOrMark)
}

// otherRunLen is rule 4.
func otherRunLen(s string, first rune, firstLen int) int {
	j := 0
	if first == ' ' {
		j = firstLen
	}
	n := runLen(s[j:], isOther)
	if n == 0 {
		return 0
	}
	n += j
	return n + runLen(s[n:], isNewline)
}

// spaceRunPieceLen is rules 5–7; s starts with white space.
func spaceRunPieceLen(s string) int {
	end, lastNewlineEnd, lastStart := 0, 0, 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		if !unicode.IsSpace(r) {
			break
		}
		lastStart = end
		end += size
		if isNewline(r) {
			lastNewlineEnd = end
		}
	}
	switch {
	case end == 0:
		// Unreachable for well-formed input: every character is a letter,
		// mark, number, white space or matched by rule 4. Step one character
		// so that the scan always advances.
		_, size := utf8.DecodeRuneInString(s)
		return size
	case lastNewlineEnd > 0:
		return lastNewlineEnd
	case end == len(s) || lastStart == 0:
		return end
	}
	return lastStart
}

// runLen returns the byte length of the longest prefix of s whose characters
// all satisfy in.
func runLen(s string, in func(rune) bool) int {
	for i, r := range s {
		if !in(r) {
			return i
		}
	}
	return len(s)
}
