package registry

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	cases := []struct {
		args   []string
		name   string
		widths []int
	}{
		{[]string{"katcoder"}, "katcoder", []int{4}},
		{[]string{"katcoder-8bit"}, "katcoder", []int{8}},
		{[]string{"KATCODER_8BIT"}, "katcoder", []int{8}},
		{[]string{"katcoder:4-bit"}, "katcoder", []int{4}},
		{[]string{"katcoder-8"}, "katcoder", []int{8}},
		{[]string{"kat-coder-v2.5"}, "katcoder", []int{4}},
		{[]string{"katcoder", "8bit"}, "katcoder", []int{8}},
		{[]string{"katcoder", "both"}, "katcoder", []int{4, 8}},
		{[]string{"katcoder-8bit", "8bit"}, "katcoder", []int{8}},
		{[]string{"qwen36", "4"}, "qwen36", []int{4}},
		{[]string{"qwen3.6-8bit"}, "qwen36", []int{8}},
		{[]string{"ornith15-8bit"}, "ornith15", []int{8}},
		{[]string{"agentworld", "BOTH"}, "agentworld", []int{4, 8}},
		{[]string{"qwen35-2b"}, "qwen35-2b", []int{4}},
		{[]string{"qwen35-4b-8bit"}, "qwen35-4b", []int{8}},
		{[]string{"qwen3.5-9b", "8-bit"}, "qwen35-9b", []int{8}},
		{[]string{"qwen38flash-8bit"}, "qwen38flash", []int{8}},
		{[]string{"qwen3.8-flash-next", "both"}, "qwen38flash", []int{4, 8}},
	}
	for _, tc := range cases {
		e, widths, err := ParseTarget(tc.args)
		if err != nil || e.Name != tc.name || !slices.Equal(widths, tc.widths) {
			t.Errorf("ParseTarget(%q) = %s %v, %v; want %s %v", tc.args, e.Name, widths, err, tc.name, tc.widths)
		}
	}
}

func TestParseTargetRefuses(t *testing.T) {
	cases := []struct {
		args []string
		is   error
		want string
	}{
		{nil, nil, "NAME [4bit|8bit|both]"},
		{[]string{"a", "b", "c"}, nil, "3 arguments"},
		{[]string{"llama"}, ErrUnknown, "katcoder"},
		{[]string{"katcoder", "6bit"}, nil, "want 4bit, 8bit or both"},
		{[]string{"katcoder-8bit", "4bit"}, nil, "asks for 8-bit"},
		{[]string{"katcoder-6bit"}, ErrUnknown, "known models"},
		{[]string{"qwen36-mtp"}, ErrUnsupported, "draft heads"},
		{[]string{"ornith15-mtp", "4bit"}, ErrUnsupported, "install ornith15 instead"},
		{[]string{"qwen36-mtp", "both"}, ErrUnsupported, "not run by the nvmai runtime"},
	}
	for _, tc := range cases {
		_, _, err := ParseTarget(tc.args)
		if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTarget(%q) = %v; want an error (%v) mentioning %q", tc.args, err, tc.is, tc.want)
		}
	}
}

func TestLookupReturnsTheSpelledWidth(t *testing.T) {
	for name, width := range map[string]int{"katcoder": 0, "katcoder-4bit": 4, "katcoder-8bit": 8} {
		e, err := Lookup(name)
		if err != nil || e.Width != width {
			t.Errorf("Lookup(%s) = width %d, %v; want %d", name, e.Width, err, width)
		}
	}
	e, err := Lookup("katcoder")
	if err != nil || e.Repo != "Kwaipilot/KAT-Coder-V2.5-Dev" || e.Architecture != ArchQwen35MoE ||
		!strings.Contains(e.Notes, "temperature 1.0") {
		t.Errorf("katcoder = %+v, %v", e, err)
	}
}

func TestEmbeddedRegistryIsValid(t *testing.T) {
	all := All()
	if len(all) == 0 {
		t.Fatal("empty registry")
	}
	for _, name := range []string{"katcoder", "qwen36", "ornith15", "agentworld", "qwen35-2b", "qwen35-4b", "qwen35-9b", "qwen38flash"} {
		if e, err := Lookup(name); err != nil || !e.Supported {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, e := range all {
		if !e.Pinned() && e.RevisionNote == "" {
			t.Errorf("%s: revision %q is neither a 40-hex commit nor explained", e.Name, e.Revision)
		}
		if e.Supported != slices.Contains(runnableArchitectures, e.Architecture) {
			t.Errorf("%s: supported=%v for architecture %s", e.Name, e.Supported, e.Architecture)
		}
	}
	// All hands out copies.
	all[0].Widths[0] = 99
	if All()[0].Widths[0] == 99 {
		t.Error("All exposes the registry's own slices")
	}
}

func TestValidateCatchesBadEntries(t *testing.T) {
	good := `{"name":"m","aliases":[],"title":"","repo":"a/b","revision":"main","revision_note":"why",` +
		`"architecture":"qwen3_5","supported":true,"widths":[4],"notes":""}`
	cases := map[string]string{
		"good":               good,
		"unexplained branch": strings.Replace(good, `"why"`, `""`, 1),
		"pinned":             strings.Replace(strings.Replace(good, `"main"`, `"`+strings.Repeat("a", 40)+`"`, 1), `"why"`, `""`, 1),
		"bad repo":           strings.Replace(good, `"a/b"`, `"a/b/c"`, 1),
		"unknown arch":       strings.Replace(good, `"qwen3_5"`, `"llama"`, 1),
		"no reason":          strings.Replace(good, `"supported":true`, `"supported":false`, 1),
		"width 6":            strings.Replace(good, `[4]`, `[6]`, 1),
		"name with width":    strings.Replace(good, `"name":"m"`, `"name":"m-8bit"`, 1),
		"unknown field":      strings.Replace(good, `"notes":""`, `"notes":"","sha":"x"`, 1),
		"duplicate":          good + "," + good,
		"sized":              strings.Replace(good, `"notes":""`, `"notes":"","geometry":"qwen3.5-2b","download_bytes":4000000000`, 1),
		"bad geometry":       strings.Replace(good, `"notes":""`, `"notes":"","geometry":"Qwen 2B"`, 1),
		"negative download":  strings.Replace(good, `"notes":""`, `"notes":"","download_bytes":-1`, 1),
	}
	ok := map[string]bool{"good": true, "pinned": true, "sized": true}
	for name, models := range cases {
		_, err := parse([]byte(`{"version":1,"models":[` + models + `]}`))
		if (err == nil) != ok[name] {
			t.Errorf("%s: err=%v, want ok=%v", name, err, ok[name])
		}
	}
}

func FuzzParseTarget(f *testing.F) {
	f.Add("katcoder-8bit", "")
	f.Fuzz(func(t *testing.T, name, width string) {
		args := []string{name}
		if width != "" {
			args = append(args, width)
		}
		e, widths, err := ParseTarget(args)
		if err != nil {
			return
		}
		if !e.Supported || len(widths) == 0 {
			t.Fatalf("ParseTarget(%q) accepted %+v %v", args, e, widths)
		}
		for _, w := range widths {
			if !slices.Contains(e.Widths, w) {
				t.Fatalf("ParseTarget(%q) gave width %d, %s offers %v", args, w, e.Name, e.Widths)
			}
		}
	})
}

// qwen38flash runs: 4- and 8-bit, the synth geometry that sizes it.
func TestQwen38FlashIsRunnable(t *testing.T) {
	e, err := Lookup("qwen38flash-4bit")
	if err != nil || e.Architecture != ArchQwen4Exp || e.Geometry != "qwen3.8-flash-next-125b-a6b" ||
		!slices.Equal(e.Widths, []int{4, 8}) || e.Width != 4 || !e.Supported {
		t.Fatalf("qwen38flash = %+v, %v", e, err)
	}
	e.Architecture = "qwen9_future"
	if err := validateEntry(e); err == nil || !strings.Contains(err.Error(), "does not run architecture") {
		t.Fatalf("a supported entry of an architecture the runtime lacks validated (%v)", err)
	}
}
