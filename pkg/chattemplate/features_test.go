package chattemplate

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestFeatures probes each test template: only the Qwen3.8 one reads
// reasoning_effort and keeps earlier reasoning by default.
func TestFeatures(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  Features
	}{
		{"qwen35", Features{}},
		{"qwen36", Features{}},
		{"qwen38", Features{ReasoningEfforts: []string{"low", "medium", "xhigh"}, DefaultEffort: "xhigh", PreservesThinking: true}},
		{"tiny-moe-fused", Features{}},
	} {
		tmpl, err := Load(filepath.Join("testdata/models", tc.model))
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Features(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Features() = %+v, want %+v", tc.model, got, tc.want)
		}
	}
}

// TestFeaturesByBehaviour: the probe reads what a template does, not names.
func TestFeaturesByBehaviour(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      Features
	}{
		{"mentions but ignores", `{# reasoning_effort #}{% for m in messages %}{{ m.content }}{% endfor %}`, Features{}},
		{"free text", `Reasoning: {{ reasoning_effort | default('medium') }}{% for m in messages %}{{ m.content }}{% endfor %}`,
			Features{ReasoningEfforts: EffortLevels, DefaultEffort: "medium"}},
		{"keeps reasoning", `{% for m in messages %}{{ m.reasoning_content }}{{ m.content }}{% endfor %}`, Features{PreservesThinking: true}},
		{"does not render", `{{ raise_exception('no') }}`, Features{}},
		{"refuses a system message", `{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}{{ reasoning_effort }}`,
			Features{ReasoningEfforts: EffortLevels}},
	} {
		tmpl, err := Parse(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Features(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Features() = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestEffortMapping(t *testing.T) {
	q38 := Features{ReasoningEfforts: []string{"low", "medium", "xhigh"}}
	for _, tc := range []struct {
		f        Features
		in, want string
		ok       bool
	}{
		{q38, "low", "low", true},
		{q38, "medium", "medium", true},
		{q38, "high", "xhigh", true},
		{q38, "xhigh", "xhigh", true},
		{q38, "max", "xhigh", true},
		{q38, "none", "", false},
		{q38, "bogus", "", false},
		{Features{ReasoningEfforts: []string{"medium", "high"}}, "low", "medium", true},
		{Features{}, "low", "", false},
	} {
		got, ok := tc.f.Effort(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v.Effort(%q) = %q, %v; want %q, %v", tc.f.ReasoningEfforts, tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// Features may be asked from many requests at once (go test -race).
func TestFeaturesConcurrent(t *testing.T) {
	tmpl, err := Load(filepath.Join("testdata/models", "qwen38"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Features)
	for range 4 {
		go func() { done <- tmpl.Features() }()
	}
	for range 4 {
		if f := <-done; f.DefaultEffort != "xhigh" {
			t.Errorf("Features() = %+v", f)
		}
	}
}
