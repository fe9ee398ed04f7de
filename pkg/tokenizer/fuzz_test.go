package tokenizer

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// expectedRoundTrip is what decoding the encoding of s must give: s with
// every stretch between added tokens NFC-normalised on its own (added tokens
// are matched on the raw text first). The added tokens are found here by a
// direct search, independent of addedMatcher: at each character, the longest
// content that starts there.
func expectedRoundTrip(s string, contents []string) string {
	var out, text strings.Builder
	for i := 0; i < len(s); {
		longest := ""
		for _, c := range contents {
			if len(c) > len(longest) && strings.HasPrefix(s[i:], c) {
				longest = c
			}
		}
		if longest == "" {
			_, size := utf8.DecodeRuneInString(s[i:])
			text.WriteString(s[i : i+size])
			i += size
			continue
		}
		out.WriteString(norm.NFC.String(text.String()))
		text.Reset()
		out.WriteString(longest)
		i += len(longest)
	}
	out.WriteString(norm.NFC.String(text.String()))
	return out.String()
}

// FuzzRoundTrip: for valid UTF-8, Decode(Encode(s)) is NFC(s) (per stretch
// between added tokens), and the scanner's pieces tile their input.
func FuzzRoundTrip(f *testing.F) {
	f.Add("Hello, world!")
	f.Add("<|im_start|>user\nx\u0301<|im_end|>\n")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		tok := fixtureTokenizer(t, "tiny-moe-fused")
		if joined := strings.Join(pieces(s), ""); joined != s {
			t.Fatalf("pieces of %q join to %q", s, joined)
		}
		contents := make([]string, 0, len(tok.addedIDs))
		for c := range tok.addedIDs {
			contents = append(contents, c)
		}
		ids := tok.Encode(s)
		for _, id := range ids {
			if id < 0 || id >= tok.IDCount() {
				t.Fatalf("Encode(%q) produced id %d outside 0…%d", s, id, tok.IDCount()-1)
			}
		}
		if got, want := tok.Decode(ids), expectedRoundTrip(s, contents); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}

// FuzzStreamDecode: the concatenation of Push results and Flush equals
// Decode of all the ids, every Push result is valid UTF-8, and the text so
// far is always a prefix of the full decoding. Ids come from the input two
// bytes at a time and include unknown and negative ids.
func FuzzStreamDecode(f *testing.F) {
	f.Add([]byte{0xac, 0x00, 0xfd, 0x00}, false)
	f.Add([]byte{0x02, 0x10, 0x00, 0x10}, true)
	f.Fuzz(func(t *testing.T, data []byte, skipSpecial bool) {
		tok := fixtureTokenizer(t, "tiny-moe-fused")
		var ids []int
		for len(data) >= 2 {
			v := int(binary.LittleEndian.Uint16(data))
			data = data[2:]
			switch {
			case v == 0xFFFF:
				ids = append(ids, -1)
			default:
				ids = append(ids, v%(tok.IDCount()+64))
			}
		}
		opts := DecodeOptions{SkipSpecialTokens: skipSpecial}
		want := tok.DecodeWithOptions(ids, opts)
		d := tok.NewStreamDecoder(opts)
		var got strings.Builder
		for _, id := range ids {
			out := d.Push(id)
			if !utf8.ValidString(out) {
				t.Fatalf("Push(%d) returned invalid UTF-8 %q", id, out)
			}
			got.WriteString(out)
			if !strings.HasPrefix(want, got.String()) {
				t.Fatalf("streamed text %q is not a prefix of Decode = %q", got.String(), want)
			}
		}
		got.WriteString(d.Flush())
		if got.String() != want {
			t.Fatalf("stream decode of %v = %q, Decode = %q", ids, got.String(), want)
		}
	})
}

// FuzzParse: Parse never panics on arbitrary tokenizer.json and
// tokenizer_config.json, and whatever it accepts can encode and decode.
// The smallest valid tokenizer.json is a few KB (256 byte symbols), and the
// fuzzer minimises each new input for up to a minute by default; pass
// -fuzzminimizetime 1s for short runs.
func FuzzParse(f *testing.F) {
	f.Add(mustJSON(f, syntheticTokenizer()), []byte(`{"chat_template": "x", "eos_token": "<x>"}`))
	f.Fuzz(func(t *testing.T, tokJSON, config []byte) {
		tok, err := Parse(tokJSON, config)
		if err != nil {
			if _, ok := err.(*FormatError); !ok {
				t.Fatalf("Parse error %v is a %T, want *FormatError", err, err)
			}
			return
		}
		ids := tok.Encode("hello <x>y wörld\r\n  12 'S")
		_ = tok.Decode(ids)
		for _, id := range ids {
			if id < 0 || id >= tok.IDCount() {
				t.Fatalf("Encode produced id %d outside 0…%d", id, tok.IDCount()-1)
			}
		}
	})
}
