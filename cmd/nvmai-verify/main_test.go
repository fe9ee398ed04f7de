package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
	"github.com/nvmai/nvmai/pkg/convert"
)

// run executes the command in-process and returns its stdout and the exit
// status cliutil.Run would give the process.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	r := clitest.Run(t, app(), args...)
	return r.Stdout, r.Code
}

var shared struct {
	once sync.Once
	dir  string
	err  error
}

// install converts the embedded model at 4 bits once and returns a fresh
// copy inside a new models directory: MODELS/m4.
func install(t *testing.T) (models string) {
	t.Helper()
	root := repoRoot(t)
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "nvmai-verify-cmd-*")
		if shared.err == nil {
			_, shared.err = convert.Run(context.Background(), convert.Options{
				Input:   filepath.Join(root, "testdata", "tiny-moe-fused"),
				Targets: []convert.Target{{Bits: 4, Dir: filepath.Join(shared.dir, "m4")}},
			})
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	models = t.TempDir()
	copyDir(t, filepath.Join(shared.dir, "m4"), filepath.Join(models, "m4"))
	return models
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func TestVerifyInstallExitCodesAndJSON(t *testing.T) {
	models := install(t)
	dir := filepath.Join(models, "m4")

	out, code := run(t, "--verify-install", dir)
	if code != 0 || !strings.Contains(out, dir+": ok") {
		t.Fatalf("sound install: exit %d, output %q", code, out)
	}

	out, code = run(t, "--verify-install", dir, "--json")
	var sound map[string]any
	if err := json.Unmarshal([]byte(out), &sound); err != nil || code != 0 {
		t.Fatalf("--json: exit %d, %v, output %q", code, err, out)
	}
	for _, key := range []string{"dir", "model_id", "bits", "files_checked", "bytes_hashed", "problems"} {
		if _, ok := sound[key]; !ok {
			t.Errorf("--json report lacks %q: %v", key, sound)
		}
	}
	if p, ok := sound["problems"].([]any); !ok || len(p) != 0 {
		t.Errorf("problems of a sound install: %v (want an empty list, not null)", sound["problems"])
	}

	if err := os.WriteFile(filepath.Join(dir, "stray.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "--verify-install", dir, "--json")
	var damaged struct {
		Problems []map[string]string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &damaged); err != nil || code != cliutil.ExitFailure {
		t.Fatalf("damaged install: exit %d, %v", code, err)
	}
	if len(damaged.Problems) != 1 || damaged.Problems[0]["file"] != "stray.txt" || damaged.Problems[0]["expected"] == "" || damaged.Problems[0]["found"] == "" {
		t.Errorf("problems %v, want one naming stray.txt with expected and found", damaged.Problems)
	}
	out, code = run(t, "--verify-install", dir)
	if code != cliutil.ExitFailure || !strings.Contains(out, "FAIL stray.txt: expected") {
		t.Errorf("text report: exit %d, %q", code, out)
	}
	if _, code := run(t, "--verify-install", dir, "--reissue"); code != cliutil.ExitFailure {
		t.Errorf("--reissue over a stray file: exit %d", code)
	}
}

func TestUsageErrors(t *testing.T) {
	models := t.TempDir()
	for _, args := range [][]string{
		{},
		{"--no-such-flag"},
		{"--verify-install", models, "extra-argument"},
		{"golden"},
		{"golden", "--models-dir", models, "--force"},
		{"golden", "--models-dir", models, "--bogus"},
		{"golden", "--models-dir", models, "--engine", "tpu"},
		{"golden", "--models-dir", models, "--engine", "gpu", "--record"},
	} {
		if _, code := run(t, args...); code != cliutil.ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, cliutil.ExitUsage)
		}
	}
	if _, code := run(t, "--verify-install", filepath.Join(models, "absent")); code != cliutil.ExitFailure {
		t.Errorf("missing install: exit %d, want %d", code, cliutil.ExitFailure)
	}
}

func writeTargets(t *testing.T, golden, json string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(golden, "targets.json"), []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGoldenCommand(t *testing.T) {
	models := install(t)
	golden := t.TempDir()
	writeTargets(t, golden, `{"defaults": {"prompt": "Once upon a", "tokens": 3, "seed": 1},
 "targets": [{"name": "m4", "install": "m4", "bits": 4}, {"name": "absent-8bit", "install": "absent-8bit", "bits": 8}]}`)
	base := []string{"golden", "--models-dir", models, "--golden-dir", golden, "--threads", "2"}

	out, code := run(t, append(base, "--record", "--commit", "abc")...)
	if code != 0 || !strings.Contains(out, "RECORDED m4 -> ") || !strings.Contains(out, "NOT CHECKED absent-8bit: ") {
		t.Fatalf("record: exit %d\n%s", code, out)
	}
	// With every baseline present, --record records nothing and checks the rest.
	if out, code := run(t, append(base, "--record")...); code != 0 || !strings.Contains(out, "PASS m4 (") || !strings.Contains(out, "0 recorded") {
		t.Errorf("second --record without --force: exit %d, want 0 with m4 checked\n%s", code, out)
	}
	if out, code := run(t, append(base, "--only", "m4")...); code != 0 || strings.Contains(out, "absent-8bit") {
		t.Errorf("--only m4: exit %d\n%s", code, out)
	}

	out, code = run(t, base...)
	if code != 0 || !strings.Contains(out, "PASS m4 (") || !strings.Contains(out, "not checked: absent-8bit\n") {
		t.Errorf("check: exit %d\n%s", code, out)
	}

	out, code = run(t, append(base, "--json")...)
	var rep map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	for _, key := range []string{"ok", "models_dir", "golden_dir", "results", "not_checked", "uncovered", "excused", "models_dir_changes", "passed", "failed", "recorded"} {
		if _, ok := rep[key]; !ok {
			t.Errorf("--json report lacks %q", key)
		}
	}
	var results []map[string]string
	var notChecked []string
	json.Unmarshal(rep["results"], &results)
	json.Unmarshal(rep["not_checked"], &notChecked)
	if len(results) != 2 || results[0]["target"] != "m4" || results[0]["status"] != "passed" || results[1]["status"] != "not-checked" {
		t.Errorf("results %v", results)
	}
	if !slices.Equal(notChecked, []string{"absent-8bit"}) {
		t.Errorf("not_checked %v", notChecked)
	}

	// The GPU engine is checked against the CPU engine's baselines
	// (scripts/gpu-check.sh runs this where NVMAI_GPU=1); without a GPU the
	// target fails, saying why.
	out, code = run(t, append(base, "--only", "m4", "--engine", "gpu")...)
	switch {
	case os.Getenv("NVMAI_GPU") == "1":
		if code != 0 || !strings.Contains(out, "PASS m4 (") {
			t.Errorf("--engine gpu: exit %d, want m4 to pass against the CPU engine's baseline\n%s", code, out)
		}
	case code != cliutil.ExitFailure || !strings.Contains(out, "FAIL m4: ") || !strings.Contains(strings.ToLower(out), "gpu"):
		t.Errorf("--engine gpu without a GPU: exit %d, want the target failed naming the GPU\n%s", code, out)
	}

	// An install no target covers fails the gate, named.
	copyDir(t, filepath.Join(models, "m4"), filepath.Join(models, "extra"))
	out, code = run(t, base...)
	if code != cliutil.ExitFailure || !strings.Contains(out, "UNCOVERED extra: ") {
		t.Errorf("uncovered install: exit %d\n%s", code, out)
	}
	// ... unless excused with a reason.
	writeTargets(t, golden, `{"defaults": {"prompt": "Once upon a", "tokens": 3, "seed": 1},
 "targets": [{"name": "m4", "install": "m4", "bits": 4}], "not_golden": [{"install": "extra", "reason": "a test copy"}]}`)
	out, code = run(t, base...)
	if code != 0 || !strings.Contains(out, "EXCUSED extra: a test copy") {
		t.Errorf("excused install: exit %d\n%s", code, out)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	return testfix.RepoRoot(t)
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	testfix.CopyTree(t, src, dst)
}

// M2, L1, L11, L26 on nvmai-verify: one-line usage errors with the
// subcommand's help, ranges, --version, and JSON that always has "ok".
func TestCommandLine(t *testing.T) {
	models := t.TempDir()
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--verify-instal", models}, "unknown flag --verify-instal; did you mean --verify-install? (see nvmai-verify --help)"},
		{[]string{"golden", "--modles-dir", models}, "unknown flag --modles-dir; did you mean --models-dir? (see nvmai-verify golden --help)"},
		{[]string{"--verify-install", models, "--threads", "-1"}, "--threads -1 is out of range: use 1 to 4096"},
		{[]string{"golden", "--models-dir", models, "--threads", "0"}, "--threads 0 is out of range: use 1 to 4096 (see nvmai-verify golden --help)"},
		{[]string{"--verify-install", models, "golden"}, "--verify-install does not apply to nvmai-verify golden"},
	} {
		clitest.UsageError(t, app(), tc.stderr, tc.args...)
	}
	if r := clitest.Run(t, app(), "--version"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "nvmai-verify devel") {
		t.Errorf("--version: exit %d, %q", r.Code, r.Stdout)
	}
	r := clitest.Run(t, app(), "--verify-install", filepath.Join(models, "absent"), "--json")
	var obj map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &obj); err != nil || r.Code != cliutil.ExitFailure || obj["ok"] != false || !strings.Contains(obj["error"].(string), "absent") {
		t.Errorf("--json on a missing install: exit %d, %v, stdout %q", r.Code, err, r.Stdout)
	}
	r = clitest.Run(t, app(), "golden", "--models-dir", models, "--golden-dir", filepath.Join(models, "absent"), "--json")
	obj = nil
	if err := json.Unmarshal([]byte(r.Stdout), &obj); err != nil || r.Code != cliutil.ExitFailure || obj["ok"] != false {
		t.Errorf("golden --json without targets: exit %d, %v, stdout %q", r.Code, err, r.Stdout)
	}
}

func TestJSONReportHasOK(t *testing.T) {
	dir := filepath.Join(install(t), "m4")
	for _, tc := range []struct {
		damage bool
		ok     bool
	}{{false, true}, {true, false}} {
		if tc.damage {
			os.WriteFile(filepath.Join(dir, "stray.txt"), []byte("x"), 0o644)
		}
		out, _ := run(t, "--verify-install", dir, "--json")
		var rep map[string]any
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep["ok"] != tc.ok || rep["dir"] != dir {
			t.Errorf("damaged %v: ok %v (want %v), %v", tc.damage, rep["ok"], tc.ok, err)
		}
	}
}
