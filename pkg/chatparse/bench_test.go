package chatparse

import (
	"strings"
	"testing"
)

// BenchmarkParserStream feeds a reasoning block, an answer and two calls
// with a 20 KB code value in 4-byte pieces, about a token each.
func BenchmarkParserStream(b *testing.B) {
	code := strings.Repeat("if a < b {\n\treturn \"</x>\"\n}\n", 700)
	text := strings.Repeat("Think about it. ", 200) + "\n</think>\n\nDoing it.\n\n" +
		call("write_file", "path", "a.go", "content", code, "append", "False") + "\n" + call("read_file", "path", "a.go")
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		p := New(Options{InReasoning: true, Tools: testTools, NewID: func() string { return "call_x" }})
		for i := 0; i < len(text); i += 4 {
			p.Push(text[i:min(i+4, len(text))])
		}
		p.Finish()
	}
}
