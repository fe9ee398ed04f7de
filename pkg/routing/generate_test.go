package routing

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.sha256 from the generator's output")

// The published points of docs/routing.md (from shared/docs/routing-locality.md):
// a 512-token trace, replayed from cold through a per-layer LRU, must land
// within ±3 points of each.
var calibrationPoints = []struct {
	what   string
	geom   Geometry
	regime Regime
	slots  int
	hit    float64 // percent
}{
	{"Qwen3-30B-A3B diverse, LRU-51 (kekzl/imp#1359)", Geometry{48, 128, 8}, Diverse, 51, 90},
	{"Qwen3.5-35B-A3B diverse, 27 slots (Helldez/BigMoeOnEdge#74)", Geometry{40, 256, 8}, Diverse, 27, 56},
	{"Qwen3.5-35B-A3B diverse, 40 slots (Helldez/BigMoeOnEdge#74)", Geometry{40, 256, 8}, Diverse, 40, 65},
	{"Qwen3.8-Flash-Next agent, 36.6% residency (FlashML-org/FreeToken#231)", Geometry{48, 512, 10}, Agent, 187, 93},
	{"Qwen3.5-35B-A3B agent, 40% residency (routing-locality.md: 90%+)", Geometry{40, 256, 8}, Agent, 102, 92},
	{"Qwen3-30B-A3B agent, 40% residency (agent is at least as local as diverse: 90%+)", Geometry{48, 128, 8}, Agent, 51, 93},
}

func TestCalibration(t *testing.T) {
	for _, c := range calibrationPoints {
		for _, seed := range []uint64{1, 2} {
			tr, err := Generate(c.geom, c.regime, 512, seed)
			if err != nil {
				t.Fatal(err)
			}
			got := 100 * SimulateLRU(tr, c.slots).HitRate
			if math.Abs(got-c.hit) > 3 {
				t.Errorf("%s, seed %d: LRU hit %.1f%%, published %.0f%% (±3)", c.what, seed, got, c.hit)
			}
		}
	}
}

// The Qwen3-30B diverse trace also matches the other published statistics:
// 0.38–0.80 new experts per layer per token at LRU-51, and a mildly skewed
// popularity whose top expert takes a few percent of the picks.
func TestCalibrationSecondaryStatistics(t *testing.T) {
	tr, err := Generate(Geometry{48, 128, 8}, Diverse, 512, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := SimulateLRU(tr, 51).NewPerLayerToken; n < 0.38 || n > 0.80 {
		t.Errorf("new experts per layer per token %.2f, published 0.38–0.80", n)
	}
	counts := make([]int, 128)
	for tok := range tr.Tokens() {
		for _, e := range tr.Row(tok, 0) {
			counts[e]++
		}
	}
	top := 0
	for _, c := range counts {
		top = max(top, c)
	}
	if share := float64(top) / float64(tr.Tokens()*8); share < 0.03 || share > 0.09 {
		t.Errorf("top expert takes %.1f%% of layer 0's picks; published 4.3–6.3%%", 100*share)
	}
}

var goldenCases = []struct {
	geom   Geometry
	regime Regime
	tokens int
	seed   uint64
}{
	{Geometry{48, 128, 8}, Diverse, 64, 1},
	{Geometry{40, 256, 8}, Diverse, 64, 7},
	{Geometry{40, 256, 8}, Agent, 64, 1},
	{Geometry{48, 512, 10}, Agent, 32, 3},
	{Geometry{8, 16, 4}, Uniform, 64, 1},
	{Geometry{3, 200, 9}, Diverse, 50, 1<<63 + 5}, // between the tuned expert counts
}

// TestGoldenTraces: the same seed writes the same bytes on every machine;
// go test -run Golden -update rewrites testdata/golden.sha256 after a
// deliberate change to the generator (say so in docs/routing.md).
func TestGoldenTraces(t *testing.T) {
	var lines []string
	for _, c := range goldenCases {
		tr, err := Generate(c.geom, c.regime, c.tokens, c.seed)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := tr.WriteTo(h); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%d/%d/%d %s %d %d %s", c.geom.Layers, c.geom.Experts, c.geom.TopK, c.regime, c.tokens, c.seed, hex.EncodeToString(h.Sum(nil))))
	}
	path := filepath.Join("testdata", "golden.sha256")
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("generator output changed:\n got %s\nwant %s", got, want)
	}
}

func TestGeneratedTracesParse(t *testing.T) {
	for _, c := range goldenCases {
		tr, err := Generate(c.geom, c.regime, c.tokens, c.seed)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := tr.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		back, err := Parse(bufio.NewReader(&buf), c.geom)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !equalIDs(back.ids, tr.ids) {
			t.Fatalf("%+v: parsed trace differs", c)
		}
	}
}

func TestSyntheticSourceMatchesGenerate(t *testing.T) {
	g := Geometry{4, 64, 6}
	tr, err := Generate(g, Agent, 40, 9)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSynthetic(g, Spec{Agent, 9})
	if err != nil {
		t.Fatal(err)
	}
	if s.Describe() != "synthetic agent seed=9" || s.Wrapped() {
		t.Fatalf("Describe %q wrapped %v", s.Describe(), s.Wrapped())
	}
	var ids []int
	// Out of order: the source draws ahead as needed.
	for _, pos := range []int{39, 0, 17, 38} {
		for l := range g.Layers {
			ids, err = s.Experts(pos, l, ids)
			if err != nil {
				t.Fatal(err)
			}
			for j, e := range tr.Row(pos, l) {
				if ids[j] != int(e) {
					t.Fatalf("pos %d layer %d: %v, want %v", pos, l, ids, tr.Row(pos, l))
				}
			}
		}
	}
	if _, err := s.Experts(0, g.Layers, ids); err == nil {
		t.Fatal("layer out of range accepted")
	}
}

// The bench may ask from several goroutines; every caller sees the trace
// Generate draws.
func TestSyntheticSourceConcurrent(t *testing.T) {
	g := Geometry{3, 32, 4}
	want, err := Generate(g, Diverse, 200, 4)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSynthetic(g, Spec{Diverse, 4})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []int
			for pos := w; pos < 200; pos += 3 {
				for l := range g.Layers {
					var err error
					if ids, err = s.Experts(pos, l, ids); err != nil {
						errs <- err
						return
					}
					for j, e := range want.Row(pos, l) {
						if ids[j] != int(e) {
							errs <- fmt.Errorf("pos %d layer %d: %v, want %v", pos, l, ids, want.Row(pos, l))
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Spec
		err  string
	}{
		{"synthetic:agent", Spec{Agent, 1}, ""},
		{"synthetic:diverse:seed=3", Spec{Diverse, 3}, ""},
		{"synthetic:uniform:seed=0", Spec{Uniform, 0}, ""},
		{"synthetic:chatty", Spec{}, `regime "chatty" is not known`},
		{"synthetic:agent:seed=-1", Spec{}, "is not seed=N"},
		{"synthetic:agent:s=1", Spec{}, "is not seed=N"},
		{"synthetic:agent:seed=1:x", Spec{}, "want synthetic:diverse"},
		{"synthetic", Spec{}, "want synthetic:diverse"},
		{"trace:agent", Spec{}, "want synthetic:diverse"},
	} {
		got, err := ParseSpec(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseSpec(%q) error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestGenerateRefuses(t *testing.T) {
	if _, err := Generate(Geometry{2, 8, 2}, "chatty", 4, 1); err == nil {
		t.Error("unknown regime accepted")
	}
	if _, err := Generate(Geometry{2, 8, 2}, Agent, 0, 1); err == nil {
		t.Error("0 tokens accepted")
	}
	if _, err := Generate(Geometry{2, 8, 9}, Agent, 4, 1); err == nil {
		t.Error("top-k above the expert count accepted")
	}
	// Top-k equal to the expert count: every layer picks every expert.
	tr, err := Generate(Geometry{2, 5, 5}, Diverse, 20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(strings.NewReader(traceText(t, tr)), tr.Geometry); err != nil {
		t.Fatal(err)
	}
}

func traceText(t *testing.T, tr *Trace) string {
	var b strings.Builder
	if _, err := tr.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
