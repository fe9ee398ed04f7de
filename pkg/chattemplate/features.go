package chattemplate

import (
	"slices"
	"strings"
)

// EffortLevels are the reasoning-effort levels nvmai maps clients' values
// onto, lowest first (OpenAI's low, medium, high, xhigh; Anthropic's max).
// none and minimal are not levels: they turn thinking off.
var EffortLevels = []string{"low", "medium", "high", "xhigh", "max"}

// Features is what a template does with the variables nvmai may set, found
// by rendering probe conversations when the template is first asked (see
// Template.Features), never from a model's name: a Qwen3.8-family template
// is one whose ReasoningEfforts is non-nil and whose PreservesThinking is
// true; Qwen3.5/3.6 templates have neither.
type Features struct {
	// ReasoningEfforts are the levels of EffortLevels the template accepts
	// as reasoning_effort with thinking on, lowest first; nil when its
	// output does not depend on reasoning_effort. The Qwen3.8 template
	// accepts low, medium and xhigh and raises for anything else.
	ReasoningEfforts []string
	// DefaultEffort is the accepted level that renders as the template
	// does without reasoning_effort ("" when none does): xhigh for 3.8.
	DefaultEffort string
	// PreservesThinking reports that an earlier assistant turn's
	// reasoning_content is rendered back without preserve_thinking being
	// set (3.8: preserve_thinking defaults on; 3.5/3.6: it does not).
	PreservesThinking bool
}

// Effort maps a client's level (one of EffortLevels) onto a level the
// template accepts: the lowest accepted level at or above it, else the
// highest accepted one. ok is false when the template reads no
// reasoning_effort or level is not one of EffortLevels.
func (f Features) Effort(level string) (string, bool) {
	want := slices.Index(EffortLevels, level)
	if want < 0 || len(f.ReasoningEfforts) == 0 {
		return "", false
	}
	for _, v := range f.ReasoningEfforts {
		if slices.Index(EffortLevels, v) >= want {
			return v, true
		}
	}
	return f.ReasoningEfforts[len(f.ReasoningEfforts)-1], true
}

// Accepts reports whether v is a reasoning_effort value the template takes.
func (f Features) Accepts(v string) bool { return slices.Contains(f.ReasoningEfforts, v) }

// Probe texts: unlikely to occur in a template.
const (
	probeReasoning = "nvmai-probe-reasoning-7f3a"
	probeEffort    = "nvmai-probe-effort-7f3a"
)

// Features probes the template once (later calls return the same value).
func (t *Template) Features() Features {
	t.featuresOnce.Do(func() { t.features = t.probe() })
	return t.features
}

func (t *Template) probe() Features {
	var f Features
	turns := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}}
	render := func(msgs []Message, kwargs map[string]any) (string, error) {
		return t.Render(Input{Messages: msgs, AddGenerationPrompt: true, Kwargs: kwargs})
	}
	base, err := render(turns, nil)
	if err != nil {
		// Some templates refuse a system message; probe without one.
		turns = turns[1:]
		if base, err = render(turns, nil); err != nil {
			return f
		}
	}
	// A template that never names the variable cannot read it; the
	// rendering probe below tells what it does with it.
	if strings.Contains(t.source, "reasoning_effort") {
		out, err := render(turns, map[string]any{"reasoning_effort": probeEffort})
		if err != nil || out != base {
			for _, v := range EffortLevels {
				out, err := render(turns, map[string]any{"reasoning_effort": v})
				if err != nil {
					continue
				}
				f.ReasoningEfforts = append(f.ReasoningEfforts, v)
				if out == base && f.DefaultEffort == "" {
					f.DefaultEffort = v
				}
			}
		}
	}
	r := probeReasoning
	history := []Message{{Role: "user", Content: "Q1"}, {Role: "assistant", Content: "A1", ReasoningContent: &r}, {Role: "user", Content: "Q2"}}
	if out, err := render(history, nil); err == nil && strings.Contains(out, probeReasoning) {
		f.PreservesThinking = true
	}
	return f
}
