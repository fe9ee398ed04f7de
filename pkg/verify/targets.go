package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"

	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/registry"
)

// TargetsFile is the name of the golden target declarations inside the
// golden directory.
const TargetsFile = "targets.json"

// maxGoldenTokens bounds the tokens of one golden generation: a baseline is
// a regression check, not a benchmark, and 4096 tokens of a 35B model already
// take minutes on a CPU.
const maxGoldenTokens = 4096

// Target is one golden check: a fixed prompt run greedily for exactly Tokens
// tokens on the install at Install (relative to the models directory) and
// compared with the baseline NAME.txt in the golden directory.
type Target struct {
	Name    string `json:"name"`
	Install string `json:"install"`
	Bits    int    `json:"bits"`
	Prompt  string `json:"prompt"`
	Tokens  int    `json:"tokens"`
	Seed    uint64 `json:"seed"`
}

// Exception is an install that is deliberately not golden-checked (a draft
// head, say), with the reason a reviewer can judge.
type Exception struct {
	Install string `json:"install"`
	Reason  string `json:"reason"`
}

// Targets is the declared set of golden checks and of excused installs.
type Targets struct {
	Targets    []Target    `json:"targets"`
	Exceptions []Exception `json:"not_golden"`
}

// targetsFile is the on-disk form: targets may leave prompt, tokens and seed
// to the defaults. With Registry set, every supported model of pkg/registry
// gets a target at each of its widths (see registryTargets), unless one of
// that name is declared explicitly.
type targetsFile struct {
	Registry bool `json:"registry"`
	Defaults struct {
		Prompt string  `json:"prompt"`
		Tokens int     `json:"tokens"`
		Seed   *uint64 `json:"seed"`
	} `json:"defaults"`
	Targets []struct {
		Name    string  `json:"name"`
		Install string  `json:"install"`
		Bits    int     `json:"bits"`
		Prompt  string  `json:"prompt,omitempty"`
		Tokens  int     `json:"tokens,omitempty"`
		Seed    *uint64 `json:"seed,omitempty"`
	} `json:"targets"`
	Exceptions []Exception `json:"not_golden"`
}

var targetName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ReadTargets reads and validates a targets file.
func ReadTargets(path string) (*Targets, error) {
	// A hand-written JSON configuration: bounded like the snapshot configs.
	raw, err := limits.ReadFile(path, limits.SnapshotJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("golden targets %s not found (run from the repository root or pass --golden-dir)", path)
	}
	if err != nil {
		return nil, err
	}
	ts, err := ParseTargets(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// ParseTargets decodes a targets file, applies its defaults and validates
// every target and exception.
func ParseTargets(raw []byte) (*Targets, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var f targetsFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a valid targets file: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the targets object")
	}
	defaults := Target{Prompt: f.Defaults.Prompt, Tokens: f.Defaults.Tokens}
	if f.Defaults.Seed != nil {
		defaults.Seed = *f.Defaults.Seed
	}
	ts := &Targets{Exceptions: f.Exceptions}
	declared := map[string]bool{}
	for _, ft := range f.Targets {
		t := Target{Name: ft.Name, Install: ft.Install, Bits: ft.Bits, Prompt: ft.Prompt, Tokens: ft.Tokens, Seed: defaults.Seed}
		if t.Prompt == "" {
			t.Prompt = defaults.Prompt
		}
		if t.Tokens == 0 {
			t.Tokens = defaults.Tokens
		}
		if ft.Seed != nil {
			t.Seed = *ft.Seed
		}
		ts.Targets = append(ts.Targets, t)
		declared[t.Name] = true
	}
	if f.Registry {
		for _, t := range registryTargets(defaults) {
			if !declared[t.Name] {
				ts.Targets = append(ts.Targets, t)
			}
		}
	}
	return ts, ts.Validate()
}

// registryTargets declares NAME-4bit and NAME-8bit (each width the registry
// offers) for every model nvmai-install can install, with the defaults'
// prompt, tokens and seed.
func registryTargets(defaults Target) []Target {
	var out []Target
	for _, e := range registry.All() {
		if !e.Supported {
			continue
		}
		for _, bits := range e.Widths {
			name := RegistryInstallDir(e.Name, bits)
			out = append(out, Target{Name: name, Install: name, Bits: bits, Prompt: defaults.Prompt, Tokens: defaults.Tokens, Seed: defaults.Seed})
		}
	}
	return out
}

// RegistryInstallDir is the directory, relative to the models directory,
// where nvmai-install puts registry model name at the given width: the
// converter's multi-width naming (OUTPUT-4bit, OUTPUT-8bit) with the
// registry name as OUTPUT.
func RegistryInstallDir(name string, bits int) string { return fmt.Sprintf("%s-%dbit", name, bits) }

// Add appends targets (those derived from the model registry, say) and
// validates the whole set again.
func (ts *Targets) Add(more ...Target) error {
	ts.Targets = append(ts.Targets, more...)
	return ts.Validate()
}

// Validate checks names, install paths, widths and lengths, and that no
// install is both a target and an exception.
func (ts *Targets) Validate() error {
	names, installs := map[string]bool{}, map[string]string{}
	for _, t := range ts.Targets {
		if err := t.validate(); err != nil {
			return err
		}
		if names[t.Name] {
			return fmt.Errorf("target %s is declared twice", t.Name)
		}
		names[t.Name] = true
		if other, dup := installs[t.Install]; dup {
			return fmt.Errorf("targets %s and %s both check install %s; one install, one target", other, t.Name, t.Install)
		}
		installs[t.Install] = t.Name
	}
	excused := map[string]bool{}
	for _, e := range ts.Exceptions {
		if err := packexperts.ValidRelPath(e.Install); err != nil {
			return fmt.Errorf("not_golden: %v", err)
		}
		if e.Reason == "" {
			return fmt.Errorf("not_golden: %s needs a reason", e.Install)
		}
		if name, ok := installs[e.Install]; ok {
			return fmt.Errorf("not_golden: %s is also checked by target %s; drop one", e.Install, name)
		}
		if excused[e.Install] {
			return fmt.Errorf("not_golden: %s is listed twice", e.Install)
		}
		excused[e.Install] = true
	}
	return nil
}

func (t *Target) validate() error {
	if !targetName.MatchString(t.Name) {
		return fmt.Errorf("target name %q must be 1-128 of a-z 0-9 . _ - (it names the baseline file)", t.Name)
	}
	if err := packexperts.ValidRelPath(t.Install); err != nil {
		return fmt.Errorf("target %s: install: %v", t.Name, err)
	}
	if t.Bits != 4 && t.Bits != 8 && t.Bits != 16 {
		return fmt.Errorf("target %s: bits %d is not 4, 8 or 16", t.Name, t.Bits)
	}
	if t.Prompt == "" {
		return fmt.Errorf("target %s: no prompt (set one or a default)", t.Name)
	}
	if t.Tokens < 1 || t.Tokens > maxGoldenTokens {
		return fmt.Errorf("target %s: tokens %d is not in 1..%d", t.Name, t.Tokens, maxGoldenTokens)
	}
	return nil
}
