package jsonconstrain

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
)

func formatSchema(name, extra string) string {
	return `{"type":"string","format":"` + name + `"` + extra + `}`
}

// Each format accepts what its RFC allows and refuses what it does not,
// as exactly as an automaton can (February 29 only in leap years).
func TestFormatStrings(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	tests := []struct {
		format           string
		accepts, refuses []string
	}{
		{"date", []string{"2024-01-31", "2024-02-29", "2000-02-29", "1900-02-28", "0000-02-29", "2023-04-30", "1999-12-01"},
			[]string{"2023-02-29", "1900-02-29", "2100-02-29", "2024-02-30", "2024-04-31", "2024-13-01", "2024-00-10", "2024-01-00", "2024-1-01", "24-01-01", "2024-01-01T00:00:00Z", ""}},
		{"time", []string{"00:00:00Z", "23:59:59z", "12:30:45.123+05:30", "01:02:03-23:59", "10:00:00.5Z"},
			[]string{"24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00+24:00", "12:00:00.Z", "1:00:00Z", "12:00:00+0530"}},
		{"date-time", []string{"2024-02-29T12:00:00Z", "2024-01-01t00:00:00.000+01:00", "1985-04-12T23:20:50.52Z"},
			[]string{"2024-02-29 12:00:00Z", "2023-02-29T12:00:00Z", "2024-01-01T12:00Z", "2024-01-01"}},
		{"duration", []string{"P1Y", "P1Y2M3DT4H5M6S", "P3W", "PT1H", "PT1M30S", "P1D", "P1M2D", "PT0S", "P10Y0M"},
			[]string{"P", "PT", "1Y", "P1H", "P1S", "PT1Y", "P1Y2D", "P1W2D", "P-1D", "P1.5Y", "PT1H2S"}},
		{"uuid", []string{"123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"},
			[]string{"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000", "{123e4567-e89b-12d3-a456-426614174000}"}},
		{"ipv4", []string{"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.0.1"},
			[]string{"256.0.0.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3", " 1.2.3.4", "1.2.3.-4"}},
		{"ipv6", []string{"::", "::1", "1::", "2001:db8::8a2e:370:7334", "2001:0db8:0000:0000:0000:ff00:0042:8329", "::ffff:192.168.1.1", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4", "fe80::1:2", "ABCD::"},
			[]string{":", ":::", "1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "1:2:3:4:5:6:7", "::1.2.3", "g::", "fe80::1%eth0", "1.2.3.4"}},
		{"hostname", []string{"a", "example.com", "a-b.c0", label63 + ".com", "xn--bcher-kva.example", "1.2.3.4"},
			[]string{"", "-a.com", "a-.com", "a..com", ".a", label63 + "a.com", "a_b.com", "é.com", strings.Repeat(label63+".", 4) + "ab"}},
		{"email", []string{"a@b", "john.doe@example.com", "x+tag@sub.example.org", "!#$%&'*+/=?^_`{|}~-@x.y", "a@[192.168.0.1]", "a@[IPv6:::1]", strings.Repeat("a", 64) + "@x.com"},
			[]string{"", "@x.com", "a@", "a.@x.com", ".a@x.com", "a..b@x.com", "a@b@c", "a b@x.com", strings.Repeat("a", 65) + "@x.com", "a@-x.com", "a@[1.2.3]", `"a b"@x.com`}},
		{"uri", []string{"http://example.com", "https://user:pw@example.com:8080/a/b?q=1&r=%20#frag", "mailto:john@example.com", "urn:isbn:0451450523", "file:///etc/hosts", "a:", "http://[::1]:80/", "ftp://1.2.3.4/", "x-y+z.w:/path", "http://h/%7Euser"},
			[]string{"", "example.com", "/relative/path", "1http://x", "http://exa mple.com", "http://h/%zz", "http://h:port/", "http://[::1/", "http://h/a b", "http://h/\u00e9"}},
	}
	for _, tc := range tests {
		schema := formatSchema(tc.format, "")
		s, err := Compile(json.RawMessage(schema))
		if err != nil {
			t.Errorf("%s: %v", tc.format, err)
			continue
		}
		for _, str := range tc.accepts {
			if !accepts(s, jsonString(str)) {
				t.Errorf("format %s refuses %s", tc.format, jsonString(str))
			} else {
				checkDocument(t, schema, jsonString(str))
			}
		}
		for _, str := range tc.refuses {
			if accepts(s, jsonString(str)) {
				t.Errorf("format %s accepts %s", tc.format, jsonString(str))
			}
		}
	}
}

// sampleString draws a random string the DFA of s's root accepts, byte by
// byte among the bytes the automaton allows, as a model sampling from a
// masked distribution would; it returns the JSON document.
func sampleString(t *testing.T, s *Schema, rng *rand.Rand) []byte {
	st := s.Start()
	doc := []byte{'"'}
	if !st.Accept('"') {
		t.Fatal("the schema refuses a string")
	}
	for steps := 0; steps < 10000; steps++ {
		var allowed []byte
		for b := 0; b < 256; b++ {
			if b == '"' {
				continue
			}
			if probe := st.Clone(); probe.Accept(byte(b)) {
				allowed = append(allowed, byte(b))
			}
		}
		if probe := st.Clone(); probe.Accept('"') && (len(allowed) == 0 || rng.IntN(8) == 0 || steps > 2000) {
			st.Accept('"')
			if !st.Done() {
				t.Fatalf("%s is not done", doc)
			}
			return append(doc, '"')
		}
		if len(allowed) == 0 {
			t.Fatalf("dead end after %s", doc)
		}
		b := allowed[rng.IntN(len(allowed))]
		st.Accept(b)
		doc = append(doc, b)
	}
	t.Fatalf("no end after %s", doc)
	return nil
}

// Strings sampled from every format's automaton, across seeds, are valid
// to the independent validator with format assertion on: each format's
// automaton generates only what its RFC (as that library reads it)
// accepts. 150 samples a schema, 20 under -short or the race detector
// (which slows the sampling an order of magnitude; scripts/test.sh runs
// all 150 without it).
func TestFormatSamplesValidate(t *testing.T) {
	samples := 150
	if testfix.Quick(raceEnabled) {
		samples = 20
	}
	for _, name := range strings.Split(formatNames(), ", ") {
		for _, extra := range []string{"", `,"maxLength":12`} {
			schema := formatSchema(name, extra)
			s, err := Compile(json.RawMessage(schema))
			if err != nil && extra != "" && strings.Contains(err.Error(), "no string of 0 to 12 characters matches at /format") {
				continue // a date-time has 20 or more
			}
			if err != nil {
				t.Fatalf("%s: %v", schema, err)
			}
			for seed := 0; seed < samples; seed++ {
				rng := rand.New(rand.NewPCG(uint64(seed), 7))
				doc := sampleString(t, s, rng)
				if seed < 2 {
					t.Logf("%s: %s", schema, doc)
				}
				checkDocument(t, schema, doc)
			}
		}
	}
}

// format beside other keywords, merged by allOf, and refused by name.
func TestFormatInSchemas(t *testing.T) {
	tests := []compileCase{
		{name: "unknown format", schema: `{"type":"string","format":"int32"}`, keyword: "format", want: `unsupported schema keyword "format": format "int32" is not one nvmai enforces (it enforces date, date-time, duration, email, hostname, ipv4, ipv6, time, uri, uuid) at /format`},
		{name: "unknown format on an integer", schema: `{"type":"integer","format":"int64"}`, keyword: "format", want: `format "int64" is not one`},
		{name: "not a string", schema: `{"type":"string","format":7}`, keyword: "format", want: "format must be a string"},
		{name: "ignored on other types", schema: `{"type":"integer","format":"date"}`, accepts: []string{`7`}},
		{name: "with pattern", schema: `{"type":"string","format":"date","pattern":"^2024-"}`, accepts: []string{`"2024-02-29"`}, refuses: []string{`"2023-01-01"`, `"2024-02-30"`}},
		{name: "hostname length", schema: `{"type":"string","format":"hostname","minLength":254}`, keyword: "format", want: "no string of 254 to 253 characters matches"},
		{name: "in allOf", schema: `{"allOf":[{"type":"string","format":"ipv4"},{"pattern":"^10\\."}]}`, accepts: []string{`"10.0.0.1"`}, refuses: []string{`"11.0.0.1"`, `"10.0.0.256"`}},
		{name: "unknown in allOf", schema: `{"allOf":[{"type":"string"},{"format":"color"}]}`, keyword: "format", want: `format "color" is not one nvmai enforces`},
		{name: "enum filtered by format", schema: `{"enum":["2024-01-01","yesterday"],"format":"date"}`, accepts: []string{`"2024-01-01"`}, refuses: []string{`"yesterday"`}},
		{name: "minLength below the shortest address", schema: `{"type":"string","format":"email","minLength":3}`, accepts: []string{`"a@b"`}, refuses: []string{`"a@"`}},
		{name: "minLength above it", schema: `{"type":"string","format":"uuid","minLength":37}`, keyword: "format", want: "no string of 37 to 4096 characters matches"},
		{name: "nullable date-time", schema: `{"anyOf":[{"type":"string","format":"date-time"},{"type":"null"}]}`, accepts: []string{`null`, `"2024-01-01T00:00:00Z"`}, refuses: []string{`"2024-01-01"`}},
	}
	runCompileCases(t, tests)
}

// Random walks through the fixture vocabulary under schemas with formats:
// every document validates with format assertion on.
func TestRandomWalksFormat(t *testing.T) {
	m, tok, endSet, walks := walkFixture(t, 20, 4)
	opts := smallOptions
	opts.MaxStringChars = 40
	opts.MaxKeyBytes = 8
	schema := `{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"ip":{"type":"string","format":"ipv4"},"day":{"type":"string","format":"date"}},"required":["when","id","ip","day"],"additionalProperties":false}`
	s, err := CompileWithOptions([]byte(schema), opts)
	if err != nil {
		t.Fatal(err)
	}
	for w := 0; w < walks; w++ {
		rng := rand.New(rand.NewPCG(uint64(w), 40))
		doc := randomWalk(t, m, tok, s, rng, endSet, w%5 == 0)
		if w < 2 {
			t.Logf("walk %d: %s", w, doc)
		}
		checkDocument(t, schema, doc)
	}
}
