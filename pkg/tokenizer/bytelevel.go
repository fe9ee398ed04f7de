package tokenizer

import "unicode/utf8"

// The ByteLevel pre-tokenizer writes every byte of the text as one printable
// symbol so that a BPE vocabulary of strings can hold arbitrary bytes. Bytes
// 33–126, 161–172 and 174–255 stand for themselves; the other 68 bytes (the
// controls, space, DEL, the C1 controls, NBSP and the soft hyphen), in
// increasing order, take the code points from U+0100 up. So space is 'Ġ'
// (U+0120), '\n' is 'Ċ' and '\t' is 'ĉ'.

// byteSymbolEnd is one past the largest code point a byte symbol uses.
const byteSymbolEnd = 0x100 + 68

var (
	// byteToSymbol[b] is the symbol of byte b.
	byteToSymbol [256]rune
	// symbolToByte[r] is 1 + the byte that symbol r stands for, or 0 where r
	// is no symbol (for example U+0020: a literal space is not a symbol).
	symbolToByte [byteSymbolEnd]uint16
)

func init() {
	next := rune(0x100)
	for b := range 256 {
		if isPrintableByte(byte(b)) {
			byteToSymbol[b] = rune(b)
		} else {
			byteToSymbol[b] = next
			next++
		}
		symbolToByte[byteToSymbol[b]] = uint16(b) + 1
	}
	if next != byteSymbolEnd {
		panic("tokenizer: byte symbol table does not have 68 remapped bytes")
	}
}

func isPrintableByte(b byte) bool {
	return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174
}

// symbolBytes maps a vocabulary string back to the bytes it stands for. When
// some character is not a byte symbol (added tokens may hold any text), the
// string's own UTF-8 bytes are used instead, as the ByteLevel decoder does.
func symbolBytes(token string) []byte {
	out := make([]byte, 0, len(token))
	for _, r := range token {
		if r < 0 || r >= byteSymbolEnd || symbolToByte[r] == 0 {
			return []byte(token)
		}
		out = append(out, byte(symbolToByte[r]-1))
	}
	return out
}

// The helpers below implement the lossy UTF-8 decoding of Rust's
// String::from_utf8_lossy, which the ByteLevel decoder uses: each maximal
// subpart of an ill-formed sequence (Unicode §3.9, "U+FFFD substitution of
// maximal subparts") becomes one U+FFFD. Go's own utf8.DecodeRune reports
// one error per byte instead ("\xe2\x82A" gives two U+FFFD there, one here),
// so it cannot be used directly.

// sequenceStatus is the outcome of reading one character at the front of a
// byte slice.
type sequenceStatus int

const (
	sequenceValid      sequenceStatus = iota // a whole, well-formed character
	sequenceInvalid                          // an ill-formed maximal subpart
	sequenceIncomplete                       // a well-formed prefix cut off by the end of the input
)

// leadingSequence reads the character at the front of p (len(p) > 0) and
// returns its length in bytes and whether it is valid, an ill-formed maximal
// subpart (to be replaced by one U+FFFD), or a prefix that more bytes could
// still complete.
func leadingSequence(p []byte) (int, sequenceStatus) {
	lead := p[0]
	if lead < utf8.RuneSelf {
		return 1, sequenceValid
	}
	size, lo, hi := sequenceShape(lead)
	if size == 0 {
		return 1, sequenceInvalid
	}
	for n := 1; n < size; n++ {
		if n >= len(p) {
			return n, sequenceIncomplete
		}
		c := p[n]
		if n > 1 {
			lo, hi = 0x80, 0xBF
		}
		if c < lo || c > hi {
			return n, sequenceInvalid
		}
	}
	return size, sequenceValid
}

// sequenceShape gives, for a non-ASCII lead byte, the length of the sequence
// it starts and the allowed range of its second byte (Unicode Table 3-7);
// size 0 means the byte cannot start a sequence.
func sequenceShape(lead byte) (size int, lo, hi byte) {
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		return 2, 0x80, 0xBF
	case lead == 0xE0:
		return 3, 0xA0, 0xBF
	case lead == 0xED:
		return 3, 0x80, 0x9F
	case lead >= 0xE1 && lead <= 0xEF:
		return 3, 0x80, 0xBF
	case lead == 0xF0:
		return 4, 0x90, 0xBF
	case lead >= 0xF1 && lead <= 0xF3:
		return 4, 0x80, 0xBF
	case lead == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}

// appendLossyUTF8 appends p to dst as valid UTF-8 and returns the result and
// the number of bytes of p consumed. When final is false, an incomplete
// sequence at the end of p is left unconsumed so that later bytes can
// complete it; when final is true it becomes U+FFFD.
func appendLossyUTF8(dst, p []byte, final bool) ([]byte, int) {
	i := 0
	for i < len(p) {
		n, status := leadingSequence(p[i:])
		switch status {
		case sequenceValid:
			dst = append(dst, p[i:i+n]...)
		case sequenceInvalid:
			dst = utf8.AppendRune(dst, utf8.RuneError)
		case sequenceIncomplete:
			if !final {
				return dst, i
			}
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		i += n
	}
	return dst, i
}

// lossyString decodes p as UTF-8 with maximal-subpart replacement.
func lossyString(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	out, _ := appendLossyUTF8(make([]byte, 0, len(p)+8), p, true)
	return string(out)
}
