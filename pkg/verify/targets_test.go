package verify

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/registry"
)

func TestParseTargetsDefaults(t *testing.T) {
	ts, err := ParseTargets([]byte(`{
 "defaults": {"prompt": "P", "tokens": 12, "seed": 7},
 "targets": [
  {"name": "a-4bit", "install": "a-4bit", "bits": 4},
  {"name": "b-8bit", "install": "family/b-8bit", "bits": 8, "prompt": "Q", "tokens": 3, "seed": 0}
 ],
 "not_golden": [{"install": "a-mtp", "reason": "draft head"}]
}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Name: "a-4bit", Install: "a-4bit", Bits: 4, Prompt: "P", Tokens: 12, Seed: 7},
		{Name: "b-8bit", Install: "family/b-8bit", Bits: 8, Prompt: "Q", Tokens: 3, Seed: 0},
	}
	if len(ts.Targets) != len(want) {
		t.Fatalf("targets %+v", ts.Targets)
	}
	for i := range want {
		if ts.Targets[i] != want[i] {
			t.Errorf("target %d is %+v, want %+v", i, ts.Targets[i], want[i])
		}
	}
	if len(ts.Exceptions) != 1 || ts.Exceptions[0].Reason != "draft head" {
		t.Errorf("exceptions %+v", ts.Exceptions)
	}
}

// TestParseTargetsRegistry: "registry": true declares NAME-4bit/NAME-8bit
// for every supported registry model at each of its widths; an explicit
// target of the same name wins.
func TestParseTargetsRegistry(t *testing.T) {
	ts, err := ParseTargets([]byte(`{"registry": true, "defaults": {"prompt": "P", "tokens": 5, "seed": 2},
 "targets": [{"name": "qwen36-8bit", "install": "elsewhere/qwen36", "bits": 8, "tokens": 9}]}`))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]Target{}
	for _, tg := range ts.Targets {
		have[tg.Name] = tg
	}
	want := 0
	for _, e := range registry.All() {
		if !e.Supported {
			if _, ok := have[RegistryInstallDir(e.Name, e.Widths[0])]; ok {
				t.Errorf("unsupported %s has a target", e.Name)
			}
			continue
		}
		for _, bits := range e.Widths {
			want++
			name := RegistryInstallDir(e.Name, bits)
			tg, ok := have[name]
			switch {
			case !ok:
				t.Errorf("no target %s", name)
			case name == "qwen36-8bit":
				if tg.Install != "elsewhere/qwen36" || tg.Tokens != 9 || tg.Prompt != "P" {
					t.Errorf("explicit target overridden: %+v", tg)
				}
			case tg != Target{Name: name, Install: name, Bits: bits, Prompt: "P", Tokens: 5, Seed: 2}:
				t.Errorf("registry target %+v", tg)
			}
		}
	}
	if len(ts.Targets) != want {
		t.Errorf("%d targets, want %d", len(ts.Targets), want)
	}
}

func TestParseTargetsRefuses(t *testing.T) {
	const ok = `{"name": "a", "install": "a", "bits": 4, "prompt": "p", "tokens": 1}`
	tests := []struct{ name, json, want string }{
		{"unknown field", `{"targets": [], "extra": 1}`, "unknown field"},
		{"trailing data", `{"targets": []} {}`, "trailing"},
		{"not json", `[`, "not a valid targets file"},
		{"bad name", `{"targets": [{"name": "A B", "install": "a", "bits": 4, "prompt": "p", "tokens": 1}]}`, "target name"},
		{"name with slash", `{"targets": [{"name": "a/b", "install": "a", "bits": 4, "prompt": "p", "tokens": 1}]}`, "target name"},
		{"install escapes", `{"targets": [{"name": "a", "install": "../a", "bits": 4, "prompt": "p", "tokens": 1}]}`, "install"},
		{"install absolute", `{"targets": [{"name": "a", "install": "/a", "bits": 4, "prompt": "p", "tokens": 1}]}`, "absolute"},
		{"six bits", `{"targets": [{"name": "a", "install": "a", "bits": 6, "prompt": "p", "tokens": 1}]}`, "bits 6"},
		{"no tokens", `{"targets": [{"name": "a", "install": "a", "bits": 4, "prompt": "p"}]}`, "tokens 0"},
		{"too many tokens", `{"targets": [{"name": "a", "install": "a", "bits": 4, "prompt": "p", "tokens": 4097}]}`, "tokens 4097"},
		{"no prompt", `{"targets": [{"name": "a", "install": "a", "bits": 4, "tokens": 1}]}`, "no prompt"},
		{"duplicate name", `{"targets": [` + ok + `, {"name": "a", "install": "b", "bits": 4, "prompt": "p", "tokens": 1}]}`, "twice"},
		{"duplicate install", `{"targets": [` + ok + `, {"name": "b", "install": "a", "bits": 4, "prompt": "p", "tokens": 1}]}`, "both check"},
		{"exception without reason", `{"targets": [], "not_golden": [{"install": "x"}]}`, "needs a reason"},
		{"exception is a target", `{"targets": [` + ok + `], "not_golden": [{"install": "a", "reason": "r"}]}`, "also checked"},
		{"exception twice", `{"targets": [], "not_golden": [{"install": "x", "reason": "r"}, {"install": "x", "reason": "r"}]}`, "twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTargets([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCommittedTargets checks the repository's declarations: the embedded
// model at every width is a target.
func TestCommittedTargets(t *testing.T) {
	ts, err := ReadTargets(filepath.Join(repoRoot(t), "benchmark", "golden", TargetsFile))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]Target{}
	for _, tg := range ts.Targets {
		have[tg.Name] = tg
	}
	for _, bits := range []int{4, 8, 16} {
		name := fmt.Sprintf("tiny-moe-%dbit", bits)
		if tg, ok := have[name]; !ok || tg.Install != name || tg.Bits != bits {
			t.Errorf("target %s: %+v, want install %s at %d bits", name, tg, name, bits)
		}
	}
}

func TestReadTargetsNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), TargetsFile)
	if err := os.WriteFile(p, []byte(`{"targets": [{"name": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTargets(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("error %v does not name %s", err, p)
	}
}

func FuzzParseTargets(f *testing.F) {
	f.Add([]byte(`{"defaults": {"prompt": "p", "tokens": 2, "seed": 1}, "targets": [{"name": "a", "install": "a", "bits": 4}], "not_golden": [{"install": "b", "reason": "r"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ts, err := ParseTargets(raw)
		if err != nil {
			return
		}
		if err := ts.Validate(); err != nil {
			t.Fatalf("parsed targets do not validate: %v", err)
		}
		for _, tg := range ts.Targets {
			if tg.Tokens < 1 || tg.Tokens > maxGoldenTokens || tg.Prompt == "" {
				t.Fatalf("accepted target %+v", tg)
			}
		}
	})
}
