package verify

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/receipt"
)

// Baseline is a stored golden generation. Prompt, Tokens, Seed and Bits must
// match the target; Machine and Commit say where it was recorded and are
// informational only; Text is compared byte for byte.
type Baseline struct {
	Target  string
	Prompt  string
	Tokens  int
	Seed    uint64
	Bits    int
	Machine string
	Commit  string
	Text    string
}

const (
	baselineMagic = "# nvmai golden baseline v1"
	textSeparator = "---\n"
	// maxBaselineBytes bounds a baseline file: at most maxGoldenTokens tokens,
	// and no BPE token of the models we run decodes to more than a few dozen
	// bytes; 4 KiB a token leaves ample room.
	maxBaselineBytes = maxGoldenTokens * 4096
)

// BaselinePath is where target name's baseline lives in goldenDir.
func BaselinePath(goldenDir, name string) string { return filepath.Join(goldenDir, name+".txt") }

// Encode renders b: header lines, the separator, then the text exactly.
func (b *Baseline) Encode() []byte {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s\n", baselineMagic)
	fmt.Fprintf(&buf, "# target: %s\n", b.Target)
	fmt.Fprintf(&buf, "# prompt: %s\n", strconv.Quote(b.Prompt))
	fmt.Fprintf(&buf, "# tokens: %d\n", b.Tokens)
	fmt.Fprintf(&buf, "# decoding: greedy, EOS ignored\n")
	fmt.Fprintf(&buf, "# seed: %d\n", b.Seed)
	fmt.Fprintf(&buf, "# width: %d\n", b.Bits)
	fmt.Fprintf(&buf, "# machine: %s\n", oneLine(b.Machine))
	fmt.Fprintf(&buf, "# commit: %s\n", oneLine(b.Commit))
	buf.WriteString(textSeparator)
	buf.WriteString(b.Text)
	return buf.Bytes()
}

func oneLine(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Join(strings.Fields(s), " ")
}

// ParseBaseline decodes a baseline file. Header lines are "# key: value";
// everything after the first "---" line is the text, byte for byte.
func ParseBaseline(raw []byte) (*Baseline, error) {
	if len(raw) > maxBaselineBytes {
		return nil, fmt.Errorf("baseline is %d bytes, over the %d-byte ceiling", len(raw), maxBaselineBytes)
	}
	head, text, ok := bytes.Cut(raw, []byte("\n"+textSeparator))
	if !ok {
		return nil, fmt.Errorf("no %q line ends the header", strings.TrimSpace(textSeparator))
	}
	b := &Baseline{Text: string(text)}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(head))
	sc.Buffer(nil, maxBaselineBytes)
	for first := true; sc.Scan(); first = false {
		line := sc.Text()
		if first {
			if line != baselineMagic {
				return nil, fmt.Errorf("first line is %q, want %q", line, baselineMagic)
			}
			continue
		}
		key, value, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": ")
		if !strings.HasPrefix(line, "# ") || !ok {
			return nil, fmt.Errorf("header line %q is not \"# key: value\"", line)
		}
		if seen[key] {
			return nil, fmt.Errorf("header key %q appears twice", key)
		}
		seen[key] = true
		if err := b.setField(key, value); err != nil {
			return nil, fmt.Errorf("header %s: %v", key, err)
		}
	}
	for _, key := range []string{"prompt", "tokens", "seed", "width"} {
		if !seen[key] {
			return nil, fmt.Errorf("header has no %q line", key)
		}
	}
	return b, nil
}

func (b *Baseline) setField(key, value string) error {
	var err error
	switch key {
	case "target":
		b.Target = value
	case "prompt":
		b.Prompt, err = strconv.Unquote(value)
	case "tokens":
		b.Tokens, err = strconv.Atoi(value)
		if err == nil && (b.Tokens < 1 || b.Tokens > maxGoldenTokens) {
			err = fmt.Errorf("%d is not in 1..%d", b.Tokens, maxGoldenTokens)
		}
	case "seed":
		b.Seed, err = strconv.ParseUint(value, 10, 64)
	case "width":
		b.Bits, err = strconv.Atoi(value)
	case "machine":
		b.Machine = value
	case "commit":
		b.Commit = value
	}
	// Unknown keys (such as "decoding") are comments for the reader.
	return err
}

// ReadBaseline reads and parses a baseline file.
func ReadBaseline(path string) (*Baseline, error) {
	raw, err := limits.ReadFile(path, maxBaselineBytes)
	if err != nil {
		return nil, err
	}
	b, err := ParseBaseline(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// writeBaseline stores b at path atomically, mode 0644 less the umask (it
// is committed to the repository).
func writeBaseline(path string, b *Baseline) error {
	return receipt.WriteFileAtomic(path, b.Encode())
}

// mismatch describes how b disagrees with target t, or "" when its header
// matches. Machine and commit are not compared.
func (b *Baseline) mismatch(t *Target) string {
	var diffs []string
	if b.Prompt != t.Prompt {
		diffs = append(diffs, fmt.Sprintf("prompt %q (target %q)", b.Prompt, t.Prompt))
	}
	if b.Tokens != t.Tokens {
		diffs = append(diffs, fmt.Sprintf("tokens %d (target %d)", b.Tokens, t.Tokens))
	}
	if b.Seed != t.Seed {
		diffs = append(diffs, fmt.Sprintf("seed %d (target %d)", b.Seed, t.Seed))
	}
	if b.Bits != t.Bits {
		diffs = append(diffs, fmt.Sprintf("width %d (target %d)", b.Bits, t.Bits))
	}
	return strings.Join(diffs, ", ")
}

// textDiff describes where got first differs from want, or "" when equal.
func textDiff(want, got string) string {
	if want == got {
		return ""
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	const context = 40
	from := max(i-context, 0)
	excerpt := func(s string) string { return strconv.Quote(s[min(from, len(s)):min(i+context, len(s))]) }
	return fmt.Sprintf("text differs at byte %d (baseline %d bytes, generated %d): baseline %s, generated %s",
		i, len(want), len(got), excerpt(want), excerpt(got))
}

// Machine describes this computer for a baseline header.
func Machine() string {
	desc := fmt.Sprintf("%s/%s, %d CPUs", goruntime.GOOS, goruntime.GOARCH, goruntime.NumCPU())
	if cpu := cpuModel(); cpu != "" {
		desc += ", " + cpu
	}
	return desc
}

func cpuModel() string {
	raw, err := limits.ReadFile("/proc/cpuinfo", 1<<22)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
