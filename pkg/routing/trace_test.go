package routing

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var small = Geometry{Layers: 2, Experts: 8, TopK: 2}

func TestParseRoundTrip(t *testing.T) {
	in := "7 0 1 2\n7 1 3 0\n8 0 2 5\n8 1 7 6\n"
	tr, err := Parse(strings.NewReader(in), small)
	if err != nil {
		t.Fatal(err)
	}
	if tr.First != 7 || tr.Tokens() != 2 {
		t.Fatalf("first %d tokens %d, want 7 and 2", tr.First, tr.Tokens())
	}
	if got := tr.Row(1, 1); got[0] != 7 || got[1] != 6 {
		t.Fatalf("row(1,1) = %v, want [7 6]", got)
	}
	var out bytes.Buffer
	if _, err := tr.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if out.String() != in {
		t.Fatalf("written %q, want %q", out.String(), in)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "no lines"},
		{"too few ids", "0 0 1\n", "line 1: 3 fields, want 4"},
		{"too many ids", "0 0 1 2 3\n", "line 1: 5 fields, want 4"},
		{"id out of range", "0 0 1 8\n", "line 1: expert id 1 \"8\" is not an integer from 0 to 7"},
		{"negative id", "0 0 -1 2\n", "line 1: expert id 0 \"-1\""},
		{"not a number", "0 0 x 2\n", "line 1: expert id 0 \"x\""},
		{"duplicate id", "0 0 3 3\n", "line 1: expert id 3 appears twice"},
		{"layer out of range", "0 0 1 2\n0 2 1 2\n", "line 2: layer \"2\" is not an integer from 0 to 1"},
		{"starts past layer 0", "0 1 1 2\n", "line 1: layer 1, want 0"},
		{"layer missing", "0 0 1 2\n1 0 1 2\n", "line 2: position 1, want 0 (layer 1 of position 0 is missing)"},
		{"layer repeated", "0 0 1 2\n0 0 1 2\n", "line 2: layer 0, want 1"},
		{"position gap", "0 0 1 2\n0 1 1 2\n2 0 1 2\n2 1 1 2\n", "line 3: position 2, want 1 (positions must follow"},
		{"position going back", "5 0 1 2\n5 1 1 2\n4 0 1 2\n", "line 3: position 4, want 6 (positions must follow one another; a trace holds one session"},
		{"truncated", "0 0 1 2\n0 1 1 2\n1 0 1 2\n", "line 3: the trace ends after layer 0 of position 1; layers 1 to 1 are missing"},
		{"blank line", "0 0 1 2\n\n", "line 2: 0 fields"},
		{"long line", "0 0 1 " + strings.Repeat("2", MaxLineBytes) + "\n", "line 1: longer than 4096 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.in), small)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestParseRefusesBadGeometry(t *testing.T) {
	for _, g := range []Geometry{{0, 8, 2}, {2, 0, 1}, {2, 8, 9}, {2, 8, 0}, {MaxLayers + 1, 8, 2}, {2, MaxExperts + 1, 2}} {
		if _, err := Parse(strings.NewReader("0 0 1 2\n"), g); err == nil {
			t.Errorf("geometry %+v accepted", g)
		}
	}
}

func TestParseRefusesTooManyPositions(t *testing.T) {
	defer func(v int) { maxTraceIDs = v }(maxTraceIDs)
	maxTraceIDs = 3 * small.Layers * small.TopK
	var in strings.Builder
	for p := range 4 {
		in.WriteString(itoa(p) + " 0 1 2\n" + itoa(p) + " 1 1 2\n")
	}
	if _, err := Parse(strings.NewReader(in.String()), small); err == nil || !strings.Contains(err.Error(), "line 8: more than 3 positions") {
		t.Fatalf("error %v, want the position limit at line 8", err)
	}
	if _, err := Parse(strings.NewReader(in.String()[:len(in.String())/4*3]), small); err != nil {
		t.Fatalf("3 positions: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("0 0 1 2\n0 1 3 0\n")
	f.Add("9 0 7 6\n9 1 5 4\n10 0 1 2\n10 1 2 1\n")
	f.Add("0 0 1 1\n")
	f.Add("0 0 1 2 3\n")
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := Parse(strings.NewReader(in), small)
		if err != nil {
			return
		}
		// Whatever parses writes back to something that parses the same.
		var out bytes.Buffer
		if _, err := tr.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(&out, small)
		if err != nil {
			t.Fatalf("rewritten trace does not parse: %v", err)
		}
		if again.First != tr.First || !equalIDs(again.ids, tr.ids) {
			t.Fatal("rewritten trace differs")
		}
		for tok := range tr.Tokens() {
			for l := range small.Layers {
				row := tr.Row(tok, l)
				if row[0] == row[1] || row[0] >= 8 || row[1] >= 8 || row[0] < 0 || row[1] < 0 {
					t.Fatalf("row %v accepted", row)
				}
			}
		}
	})
}

func TestTraceSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.trace")
	if err := os.WriteFile(path, []byte("3 0 1 2\n3 1 3 0\n4 0 2 5\n4 1 7 6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, wrap := range []bool{false, true} {
		s, err := OpenTrace(path, small, wrap)
		if err != nil {
			t.Fatal(err)
		}
		if want := "trace " + path + " sha256 "; !strings.HasPrefix(s.Describe(), want) || len(s.Describe()) != len(want)+64 {
			t.Fatalf("Describe() = %q", s.Describe())
		}
		ids, err := s.Experts(1, 0, nil)
		if err != nil || len(ids) != 2 || ids[0] != 2 || ids[1] != 5 {
			t.Fatalf("Experts(1,0) = %v, %v; want [2 5]", ids, err)
		}
		if s.Wrapped() {
			t.Fatal("wrapped before the end")
		}
		ids, err = s.Experts(2, 1, ids)
		if !wrap {
			if err == nil || !strings.Contains(err.Error(), "has 2 positions and the run needs position 2") {
				t.Fatalf("past the end: %v", err)
			}
			continue
		}
		if err != nil || ids[0] != 3 || ids[1] != 0 || !s.Wrapped() {
			t.Fatalf("wrapped Experts(2,1) = %v, %v, wrapped %v; want [3 0] and wrapped", ids, err, s.Wrapped())
		}
	}
	if _, err := OpenTrace(filepath.Join(dir, "missing"), small, false); err == nil {
		t.Fatal("a missing file opened")
	}
	if err := os.WriteFile(path, []byte("3 0 1 2\n3 1 3 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTrace(path, small, false); err == nil || !strings.Contains(err.Error(), path+": routing trace line 2: expert id 1") {
		t.Fatalf("bad file: %v", err)
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
