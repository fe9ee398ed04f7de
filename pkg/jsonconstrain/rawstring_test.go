package jsonconstrain

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func rawAccepts(r *RawString, s string) bool {
	st := r.Start()
	for i := 0; i < len(s); i++ {
		if st = r.Step(st, s[i]); st < 0 {
			return false
		}
	}
	return r.Accepting(st) && (r.MaxLength() < 0 || utf8.RuneCountInString(s) <= r.MaxLength())
}

// Raw strings are the value's bytes as they are: the characters JSON
// escapes (quotes, backslashes, controls) are themselves, and escapes are
// plain text.
func TestRawStringAcceptsAndRefuses(t *testing.T) {
	for _, tc := range []struct {
		spec   RawStringSpec
		accept []string
		refuse []string
	}{
		{RawStringSpec{Format: "date", MaxLength: -1}, []string{"2024-02-29", "1999-12-31"}, []string{"2023-02-29", "2024-13-01", "2024-1-01", " 2024-01-01", "2024-01-01\n", ""}},
		{RawStringSpec{Format: "date-time", MaxLength: -1}, []string{"2024-05-01T12:30:00Z", "2024-05-01t23:59:59.5+02:00"}, []string{"2024-05-01 12:30:00Z", "2024-05-01T24:00:00Z"}},
		{RawStringSpec{Format: "time", MaxLength: -1}, []string{"08:15:00Z"}, []string{"8:15:00Z"}},
		{RawStringSpec{Format: "duration", MaxLength: -1}, []string{"P3DT4H", "PT1S", "P2W"}, []string{"P", "PT", "3D"}},
		{RawStringSpec{Format: "uuid", MaxLength: -1}, []string{"123e4567-e89b-12d3-A456-426614174000"}, []string{"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
		{RawStringSpec{Format: "email", MaxLength: -1}, []string{"a.b+c@example.com", "x@[192.168.0.1]"}, []string{"a@b@c", ".a@b.c", "a b@c.d", `"a"@b.c`, strings.Repeat("a", 65) + "@b.c"}},
		{RawStringSpec{Format: "uri", MaxLength: -1}, []string{"https://example.com/a?b=c#d", "urn:isbn:0451450523", "mailto:a@b.c"}, []string{"/relative", "http://exa mple.com", "https://x.com/<"}},
		{RawStringSpec{Format: "ipv4", MaxLength: -1}, []string{"10.0.0.255"}, []string{"10.0.0.256", "10.0.0"}},
		{RawStringSpec{Format: "ipv6", MaxLength: -1}, []string{"::1", "fe80::1:2"}, []string{"1:::2", "g::1"}},
		{RawStringSpec{Format: "hostname", MaxLength: -1}, []string{"a-b.example"}, []string{"-a.example", "a_b"}},
		// Characters JSON would escape are raw: a quote, a backslash, a
		// newline, a tab.
		{RawStringSpec{Pattern: `^"[a-z\\]+"$`, MaxLength: -1}, []string{`"ab\c"`}, []string{`\"ab\"`, `ab`}},
		{RawStringSpec{Pattern: `^a\nb\tc$`, MaxLength: -1}, []string{"a\nb\tc"}, []string{`a\nb\tc`}},
		{RawStringSpec{Pattern: `^\u00e9+$`, MaxLength: -1}, []string{"é", "éé"}, []string{"e", "\xc3"}},
		// Unanchored patterns match anywhere; lengths count characters.
		{RawStringSpec{Pattern: `\d`, MinLength: 3, MaxLength: 5}, []string{"a1b", "é1éé"}, []string{"11", "a1bcde", "abc"}},
		{RawStringSpec{Format: "uuid", Pattern: "^0", MaxLength: -1}, []string{"023e4567-e89b-12d3-a456-426614174000"}, []string{"123e4567-e89b-12d3-a456-426614174000"}},
		{RawStringSpec{MinLength: 2, MaxLength: 3}, []string{"ab", "a\nb"}, []string{"a", "abcd"}},
	} {
		r, err := CompileRawString(tc.spec)
		if err != nil {
			t.Fatalf("%+v: %v", tc.spec, err)
		}
		for _, s := range tc.accept {
			if !rawAccepts(r, s) {
				t.Errorf("%+v refuses %q", tc.spec, s)
			}
		}
		for _, s := range tc.refuse {
			if rawAccepts(r, s) {
				t.Errorf("%+v accepts %q", tc.spec, s)
			}
		}
	}
}

func TestRawStringRefusals(t *testing.T) {
	for _, tc := range []struct {
		spec RawStringSpec
		want string
	}{
		{RawStringSpec{Format: "color", MaxLength: -1}, `format "color" is not one nvmai enforces`},
		{RawStringSpec{Pattern: `^(a)\1$`, MaxLength: -1}, `unsupported pattern "^(a)\\1$"`},
		{RawStringSpec{Pattern: `^(a$`, MaxLength: -1}, `is not an ECMA-262 regular expression`},
		{RawStringSpec{Format: "uuid", MaxLength: 10}, `no string of 0 to 10 characters matches`},
	} {
		_, err := CompileRawString(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
}

// The JSON path is unchanged: a pattern on a JSON string still reads the
// escapes, not the raw characters.
func TestRawSpellingLeavesJSONStrings(t *testing.T) {
	s, err := Compile([]byte(`{"type":"string","pattern":"^a\nb$"}`))
	if err != nil {
		t.Fatal(err)
	}
	st := s.Start()
	if !st.AcceptBytes([]byte(`"a\nb"`)) || !st.Done() {
		t.Error(`the JSON string "a\nb" is refused`)
	}
	if st := s.Start(); st.AcceptBytes([]byte("\"a\nb\"")) {
		t.Error("a raw newline inside a JSON string is accepted")
	}
}
