package verify

import (
	"strings"
	"testing"
)

func TestBaselineRoundTrip(t *testing.T) {
	texts := []string{"", "plain", "\n\nleading newlines and trailing\n", "---\n# prompt: inside the text\n---\n", "ünïcødé\x00\xff"}
	for _, text := range texts {
		b := &Baseline{Target: "t-8bit", Prompt: "line one\nline \"two\"", Tokens: 96, Seed: 1234, Bits: 8,
			Machine: "linux/amd64, 2 CPUs", Commit: "abc123", Text: text}
		got, err := ParseBaseline(b.Encode())
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if *got != *b {
			t.Errorf("round trip of %q gave %+v, want %+v", text, got, b)
		}
	}
}

// TestBaselineFormat pins the file layout the README documents.
func TestBaselineFormat(t *testing.T) {
	b := &Baseline{Target: "x-4bit", Prompt: "Hi", Tokens: 3, Seed: 1, Bits: 4, Machine: "m", Commit: "c", Text: " there"}
	want := `# nvmai golden baseline v1
# target: x-4bit
# prompt: "Hi"
# tokens: 3
# decoding: greedy, EOS ignored
# seed: 1
# width: 4
# machine: m
# commit: c
---
 there`
	if got := string(b.Encode()); got != want {
		t.Errorf("encoded\n%s\nwant\n%s", got, want)
	}
}

func TestParseBaselineRefuses(t *testing.T) {
	const magic = baselineMagic + "\n"
	const full = "# prompt: \"p\"\n# tokens: 2\n# seed: 1\n# width: 8\n"
	tests := []struct{ name, raw, want string }{
		{"empty", "", "no \"---\""},
		{"no separator", magic + full, "no \"---\""},
		{"wrong magic", "# golden\n" + full + "---\nx", "first line"},
		{"missing width", magic + "# prompt: \"p\"\n# tokens: 2\n# seed: 1\n---\nx", "\"width\""},
		{"unquoted prompt", magic + "# prompt: p\n# tokens: 2\n# seed: 1\n# width: 8\n---\nx", "prompt"},
		{"bad tokens", magic + "# prompt: \"p\"\n# tokens: many\n# seed: 1\n# width: 8\n---\nx", "tokens"},
		{"zero tokens", magic + "# prompt: \"p\"\n# tokens: 0\n# seed: 1\n# width: 8\n---\nx", "tokens"},
		{"negative seed", magic + "# prompt: \"p\"\n# tokens: 2\n# seed: -1\n# width: 8\n---\nx", "seed"},
		{"duplicate key", magic + full + "# seed: 2\n---\nx", "twice"},
		{"not a header line", magic + "prompt = p\n" + full + "---\nx", "not \"# key: value\""},
		{"too large", magic + full + "---\n" + strings.Repeat("x", maxBaselineBytes), "ceiling"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseBaseline([]byte(tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestBaselineMismatch(t *testing.T) {
	tg := Target{Name: "t", Install: "t", Bits: 8, Prompt: "p", Tokens: 4, Seed: 9}
	b := &Baseline{Prompt: "p", Tokens: 4, Seed: 9, Bits: 8, Machine: "other machine", Commit: "other commit"}
	if d := b.mismatch(&tg); d != "" {
		t.Errorf("machine and commit must not matter; got %q", d)
	}
	b.Tokens, b.Bits = 5, 4
	if d := b.mismatch(&tg); !strings.Contains(d, "tokens 5 (target 4)") || !strings.Contains(d, "width 4 (target 8)") {
		t.Errorf("mismatch %q", d)
	}
}

func TestTextDiff(t *testing.T) {
	if d := textDiff("same", "same"); d != "" {
		t.Errorf("equal texts differ: %q", d)
	}
	d := textDiff("hello world", "hello there")
	if !strings.Contains(d, "byte 6") || !strings.Contains(d, `"hello world"`) || !strings.Contains(d, `"hello there"`) {
		t.Errorf("diff %q", d)
	}
	if d := textDiff("abc", "ab"); !strings.Contains(d, "byte 2") {
		t.Errorf("prefix diff %q", d)
	}
}

func FuzzParseBaseline(f *testing.F) {
	f.Add((&Baseline{Target: "t", Prompt: "p", Tokens: 2, Seed: 1, Bits: 8, Machine: "m", Commit: "c", Text: "x\n---\ny"}).Encode())
	f.Add([]byte(baselineMagic + "\n# prompt: \"\"\n# tokens: 1\n# seed: 0\n# width: 16\n---\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := ParseBaseline(raw)
		if err != nil {
			return
		}
		again, err := ParseBaseline(b.Encode())
		if err != nil {
			t.Fatalf("re-encoded baseline does not parse: %v", err)
		}
		if again.Prompt != b.Prompt || again.Tokens != b.Tokens || again.Seed != b.Seed || again.Bits != b.Bits || again.Text != b.Text {
			t.Fatalf("round trip changed %+v into %+v", b, again)
		}
	})
}
