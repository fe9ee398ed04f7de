package httpapi

import "testing"

// Label values and HELP texts are escaped as the text format requires, so
// no value can end its quotes or its line early.
func TestMetricsEscaping(t *testing.T) {
	cases := []struct{ in, label, help string }{
		{"/v1/models", "/v1/models", "/v1/models"},
		{`a"b`, `a\"b`, `a"b`},
		{`a\b`, `a\\b`, `a\\b`},
		{"a\nb", `a\nb`, `a\nb`},
		{"\"} 1\nnvmai_x 2", `\"} 1\nnvmai_x 2`, `"} 1\nnvmai_x 2`},
		{`\"`, `\\\"`, `\\"`},
	}
	for _, c := range cases {
		if got := escapeLabel(c.in); got != c.label {
			t.Errorf("escapeLabel(%q) = %q, want %q", c.in, got, c.label)
		}
		if got := escapeHelp(c.in); got != c.help {
			t.Errorf("escapeHelp(%q) = %q, want %q", c.in, got, c.help)
		}
	}
}
