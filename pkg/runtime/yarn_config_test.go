package runtime

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/convert"
)

// yarnRefs is the "yarn" part of pkg/models/qwen35/testdata/long-refs.json
// (scripts/yarn-refs.py): transformers over the tiny-moe fixture with
// rope_parameters switched to YaRN.
type yarnRefs struct {
	RopeParameters    map[string]any       `json:"rope_parameters"`
	IDs               []int                `json:"ids"`
	ArgmaxPerPosition []int                `json:"argmax_per_position"`
	LogitsAt          map[string][]float32 `json:"logits_at"`
}

func loadYaRNRefs(t *testing.T) yarnRefs {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "models", "qwen35", "testdata", "long-refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Yarn yarnRefs `json:"yarn"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r.Yarn
}

// yarnInstall converts a copy of tiny-moe-fused whose config.json carries
// exactly the rope_parameters transformers ran with.
func yarnInstall(t *testing.T, rp map[string]any) string {
	t.Helper()
	root := t.TempDir()
	snap := filepath.Join(root, "tiny-moe-yarn")
	if err := os.CopyFS(snap, os.DirFS(testfix.Dev(t, "tiny-moe-fused"))); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(snap, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["rope_parameters"] = rp
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	os.Chmod(cfgPath, 0o644)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "m")
	if _, err := convert.Run(context.Background(), convert.Options{Input: snap, Targets: []convert.Target{{Bits: 16, Dir: dir}}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestYaRNFromConfig: a model whose config.json enables YaRN converts,
// carries it in the manifest and runs with it without any flag: past the
// original context its logits agree with transformers' within 1e-3 (the
// check qwen35's TestYaRNLogits makes on the snapshot, here through
// convert → install → engine), and so does the argmax at every position.
func TestYaRNFromConfig(t *testing.T) {
	refs := loadYaRNRefs(t)
	dir := yarnInstall(t, refs.RopeParameters)
	e, err := Load(dir, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rs := e.Install.Manifest.Geometry.RopeScaling
	if rs == nil || rs.Factor != 4 || rs.OriginalMaxPositionEmbeddings != 1024 {
		t.Fatalf("manifest rope_scaling %+v, want YaRN factor 4 over 1024", rs)
	}
	if c := e.Info(); c.RopeScaling.Type != "yarn" || c.MaxContext != 4096 {
		t.Fatalf("loaded without flags: rope %+v, context %d", c.RopeScaling, c.MaxContext)
	}
	if _, err := Load(dir, Options{Threads: 1, RopeScaling: "yarn"}); err == nil || !strings.Contains(err.Error(), "drop --rope-scaling") {
		t.Errorf("--rope-scaling yarn over the config's YaRN: %v, want a refusal", err)
	}
	// The GPU engine's refusal of YaRN is its own (pkg/gpu,
	// TestGPURegistersAndRefusesYaRNFirst).
	if testing.Short() || raceEnabled {
		t.Skip("the 1,300-token prompt runs without -short and -race")
	}
	ids := refs.IDs
	V := e.Install.Manifest.Geometry.VocabSize
	logits := positionLogits(t, e, ids, 0)
	for pos, want := range refs.LogitsAt {
		p, _ := strconv.Atoi(pos)
		if p < rs.OriginalMaxPositionEmbeddings {
			t.Fatalf("reference row %d is inside the original context", p)
		}
		d := maxAbsDiff(logits[p*V:(p+1)*V], want)
		t.Logf("position %d: max |Δlogit| %.3g against transformers", p, d)
		if d > 1e-3 || math.IsNaN(d) {
			t.Errorf("position %d: max |Δlogit| %.3g > 1e-3", p, d)
		}
	}
	for p := range ids {
		if got := argmax(logits[p*V : (p+1)*V]); got != refs.ArgmaxPerPosition[p] {
			t.Errorf("position %d: argmax %d, transformers %d", p, got, refs.ArgmaxPerPosition[p])
		}
	}
}
