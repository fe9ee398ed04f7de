package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/packexperts"
)

// review M5: `echo '{' > tokenizer.json` in a snapshot converted fine and
// verified "ok"; only nvmai-run failed. The tokenizer files and the chat
// template are now refused at convert time, naming the file, before any
// weight is read, and nothing is written.
func TestBrokenTokenizerFilesAreRefused(t *testing.T) {
	cases := []struct {
		name string
		file string
		edit func(t *testing.T, old []byte) []byte
		want []string
	}{
		{"tokenizer.json truncated (the review's repro)", "tokenizer.json", constant("{\n"), []string{"tokenizer.json", "invalid JSON"}},
		{"tokenizer.json empty", "tokenizer.json", constant(""), []string{"tokenizer.json"}},
		{"tokenizer_config.json truncated", "tokenizer_config.json", constant(`{"chat_template": "x"`), []string{"tokenizer_config.json", "invalid JSON"}},
		{"chat_template not a string", "tokenizer_config.json", setConfigKey("chat_template", 5), []string{"tokenizer_config.json", "chat_template"}},
		{"chat_template.jinja empty", "chat_template.jinja", constant(" \n"), []string{"chat_template.jinja", "empty"}},
		{"chat_template.jinja not UTF-8", "chat_template.jinja", constant("{{ x }}\xff"), []string{"chat_template.jinja", "UTF-8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := embeddedSnapshot(t)
			p := filepath.Join(src, tc.file)
			old, _ := os.ReadFile(p)
			write(t, p, string(tc.edit(t, old)))
			out := filepath.Join(t.TempDir(), "o")
			_, err := Run(context.Background(), Options{Input: src, Targets: []Target{{4, out}}, Threads: 2})
			if err == nil {
				t.Fatal("converted a snapshot with a broken " + tc.file)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			assertNoLeftovers(t, filepath.Dir(out))
		})
	}
}

// A snapshot's chat_template.jinja travels into the install (listed in the
// manifest, hashed in the receipt), and tokenizer_config.json is copied
// byte for byte, so its own chat_template is kept.
func TestChatTemplateTravels(t *testing.T) {
	src := embeddedSnapshot(t)
	const tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
	write(t, filepath.Join(src, packexperts.ChatTemplateFile), tmpl)
	out := filepath.Join(t.TempDir(), "o")
	convertInto(t, src, out, false)
	if got := readFile(t, filepath.Join(out, packexperts.ChatTemplateFile)); string(got) != tmpl {
		t.Errorf("install's chat_template.jinja is %q", got)
	}
	if !bytes.Equal(readFile(t, filepath.Join(out, packexperts.TokenizerConfigFile)), readFile(t, filepath.Join(src, packexperts.TokenizerConfigFile))) {
		t.Error("tokenizer_config.json was not copied verbatim")
	}
	m, _, err := packexperts.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, f := range m.Files {
		listed = listed || f.Name == packexperts.ChatTemplateFile
	}
	if !listed {
		t.Error("chat_template.jinja is not listed in the manifest")
	}
}

func constant(s string) func(*testing.T, []byte) []byte {
	return func(*testing.T, []byte) []byte { return []byte(s) }
}

func setConfigKey(key string, v any) func(*testing.T, []byte) []byte {
	return func(t *testing.T, old []byte) []byte {
		var m map[string]any
		if err := json.Unmarshal(old, &m); err != nil {
			t.Fatal(err)
		}
		m[key] = v
		b, _ := json.Marshal(m)
		return b
	}
}
