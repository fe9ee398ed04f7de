package verify

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "re-record the committed golden baselines of the embedded model")

// committedGoldens reads the repository's golden directory and targets.
func committedGoldens(t *testing.T) (string, *Targets) {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "benchmark", "golden")
	ts, err := ReadTargets(filepath.Join(dir, TargetsFile))
	if err != nil {
		t.Fatal(err)
	}
	return dir, ts
}

// modelsWith builds a models directory whose entries are symbolic links to
// the shared embedded installs: links[name] = "tiny-moe-8bit" and so on.
func modelsWith(t *testing.T, links map[string]string) string {
	t.Helper()
	shared := embeddedModels(t)
	dir := t.TempDir()
	for name, src := range links {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(shared, src), p); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runGate(t *testing.T, opt GateOptions) *GateReport {
	t.Helper()
	rep, err := Gate(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func resultOf(rep *GateReport, target string) TargetResult {
	for _, r := range rep.Results {
		if r.Target == target {
			return r
		}
	}
	return TargetResult{}
}

// TestCommittedGoldens is the CI check of the committed baselines: the
// embedded model converted here at 4, 8 and 16 bits must reproduce them byte
// for byte, and every other declared target is reported as not checked.
//
// go test ./pkg/verify -run TestCommittedGoldens -update re-records them:
// only for a deliberate change of the numerics, explained in the commit.
func TestCommittedGoldens(t *testing.T) {
	goldenDir, ts := committedGoldens(t)
	models := embeddedModels(t)
	if *update {
		rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: goldenDir, Targets: ts, Threads: 2,
			Record: true, Force: true, Commit: "recorded by go test -update"})
		if rep.Recorded != 3 || !rep.OK() {
			t.Fatalf("re-recording: %+v", rep.Results)
		}
	}
	rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: goldenDir, Targets: ts, Threads: 2})
	for _, r := range rep.Results {
		want := StatusNotChecked
		if strings.HasPrefix(r.Target, "tiny-moe-") {
			want = StatusPassed
		}
		if r.Status != want {
			t.Errorf("%s: %s (%s), want %s", r.Target, r.Status, r.Problem, want)
		}
	}
	if rep.Passed != 3 || !rep.OK() {
		t.Errorf("report %+v, want 3 passed and OK", rep)
	}
	if len(rep.NotChecked) != len(ts.Targets)-3 {
		t.Errorf("not checked %v, want every target but the embedded three", rep.NotChecked)
	}
}

// TestGoldenThreadCountInvariant: the golden text may not depend on how
// many threads compute it.
func TestGoldenThreadCountInvariant(t *testing.T) {
	goldenDir, ts := committedGoldens(t)
	i := slices.IndexFunc(ts.Targets, func(tg Target) bool { return tg.Name == "tiny-moe-8bit" })
	if i < 0 {
		t.Fatal("no tiny-moe-8bit target")
	}
	only := &Targets{Targets: ts.Targets[i : i+1]}
	models := modelsWith(t, map[string]string{"tiny-moe-8bit": "tiny-moe-8bit"})
	for _, threads := range []int{1, 2} {
		rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: goldenDir, Targets: only, Threads: threads})
		if r := resultOf(rep, "tiny-moe-8bit"); r.Status != StatusPassed || !rep.OK() {
			t.Errorf("threads %d: %s %s", threads, r.Status, r.Problem)
		}
	}
}

func TestGateRecordThenCheck(t *testing.T) {
	models := modelsWith(t, map[string]string{"m4": "tiny-moe-4bit"})
	golden := t.TempDir()
	ts := &Targets{Targets: []Target{{Name: "m4", Install: "m4", Bits: 4, Prompt: "Once upon a", Tokens: 6, Seed: 3}}}
	opt := GateOptions{ModelsDir: models, GoldenDir: golden, Targets: ts, Threads: 2, Commit: "c0ffee", Machine: "test box"}
	path := BaselinePath(golden, "m4")

	rec := opt
	rec.Record = true
	if r := resultOf(runGate(t, rec), "m4"); r.Status != StatusRecorded || r.Text == "" {
		t.Fatalf("record: %+v", r)
	}
	b, err := ReadBaseline(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.Prompt != "Once upon a" || b.Tokens != 6 || b.Seed != 3 || b.Bits != 4 || b.Commit != "c0ffee" || b.Machine != "test box" || b.Target != "m4" {
		t.Errorf("recorded header %+v", b)
	}
	recorded, _ := os.ReadFile(path)

	t.Run("check passes", func(t *testing.T) {
		if rep := runGate(t, opt); rep.Passed != 1 || !rep.OK() {
			t.Errorf("check after record: %+v", rep.Results)
		}
	})
	t.Run("record checks existing baselines and writes nothing", func(t *testing.T) {
		rep := runGate(t, rec)
		if r := resultOf(rep, "m4"); r.Status != StatusPassed || rep.Recorded != 0 || !rep.OK() {
			t.Errorf("second record: %+v", rep.Results)
		}
		if now, _ := os.ReadFile(path); string(now) != string(recorded) {
			t.Error("baseline overwritten without --force")
		}
	})
	t.Run("record keeps a baseline that differs and fails", func(t *testing.T) {
		b, _ := ReadBaseline(path)
		b.Text += "!"
		changed := string(b.Encode())
		writeFile(t, path, changed)
		rep := runGate(t, rec)
		if r := resultOf(rep, "m4"); r.Status != StatusFailed || !strings.Contains(r.Problem, "the baseline was kept") || rep.OK() {
			t.Errorf("record over a mismatch: %+v", r)
		}
		if now, _ := os.ReadFile(path); string(now) != changed {
			t.Error("baseline overwritten without --force")
		}
		writeFile(t, path, string(recorded))
	})
	t.Run("record with force overwrites", func(t *testing.T) {
		writeFile(t, path, "garbage")
		force := rec
		force.Force = true
		if r := resultOf(runGate(t, force), "m4"); r.Status != StatusRecorded {
			t.Errorf("forced record: %+v", r)
		}
		if now, _ := os.ReadFile(path); string(now) != string(recorded) {
			t.Error("forced record differs from the first recording")
		}
	})
	t.Run("machine and commit are informational", func(t *testing.T) {
		b, _ := ReadBaseline(path)
		b.Machine, b.Commit = "another machine", "another commit"
		writeFile(t, path, string(b.Encode()))
		if rep := runGate(t, opt); rep.Passed != 1 {
			t.Errorf("%+v", rep.Results)
		}
	})
	t.Run("changed text fails", func(t *testing.T) {
		b, _ := ReadBaseline(path)
		b.Text += "!"
		writeFile(t, path, string(b.Encode()))
		rep := runGate(t, opt)
		if r := resultOf(rep, "m4"); r.Status != StatusFailed || !strings.Contains(r.Problem, "text differs at byte") || r.Text == "" || rep.OK() {
			t.Errorf("%+v", r)
		}
	})
	t.Run("changed target fails", func(t *testing.T) {
		writeFile(t, path, string(recorded))
		longer := opt
		longer.Targets = &Targets{Targets: []Target{ts.Targets[0]}}
		longer.Targets.Targets[0].Tokens = 7
		if r := resultOf(runGate(t, longer), "m4"); r.Status != StatusFailed || !strings.Contains(r.Problem, "tokens 6 (target 7)") {
			t.Errorf("%+v", r)
		}
	})
	t.Run("missing baseline fails", func(t *testing.T) {
		remove(t, path)
		if r := resultOf(runGate(t, opt), "m4"); r.Status != StatusFailed || !strings.Contains(r.Problem, "--record") {
			t.Errorf("%+v", r)
		}
	})
}

func TestGateWidthMismatchFails(t *testing.T) {
	models := modelsWith(t, map[string]string{"m": "tiny-moe-8bit"})
	golden := t.TempDir()
	ts := &Targets{Targets: []Target{{Name: "m", Install: "m", Bits: 4, Prompt: "Once", Tokens: 1}}}
	rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: golden, Targets: ts, Record: true})
	if r := resultOf(rep, "m"); r.Status != StatusFailed || !strings.Contains(r.Problem, "8-bit install") {
		t.Errorf("%+v", r)
	}
	if _, err := os.Stat(BaselinePath(golden, "m")); !os.IsNotExist(err) {
		t.Error("a baseline was recorded for the wrong width")
	}
}

// TestGateCoverage: installs no target covers fail the gate unless excused;
// targets without an install are listed as not checked.
func TestGateCoverage(t *testing.T) {
	models := modelsWith(t, map[string]string{
		"covered":            "tiny-moe-4bit",
		"draft-head":         "tiny-moe-8bit",
		"family/forgotten":   "tiny-moe-16bit",
		".staging-leftover":  "tiny-moe-4bit", // hidden: not an install
		"family/not-a-model": "tiny-moe-4bit/experts",
	})
	golden := t.TempDir()
	ts := &Targets{
		Targets: []Target{
			{Name: "covered", Install: "covered", Bits: 4, Prompt: "Once", Tokens: 2},
			{Name: "absent-a", Install: "absent-a", Bits: 4, Prompt: "Once", Tokens: 2},
			{Name: "absent-b", Install: "family/absent-b", Bits: 8, Prompt: "Once", Tokens: 2},
			{Name: "partial", Install: "partial", Bits: 8, Prompt: "Once", Tokens: 2},
		},
		Exceptions: []Exception{{Install: "draft-head", Reason: "a draft head generates no text"}, {Install: "gone", Reason: "not installed here"}},
	}
	if err := os.Mkdir(filepath.Join(models, "partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: golden, Targets: ts, Record: true})
	if r := resultOf(rep, "partial"); r.Status != StatusFailed || !strings.Contains(r.Problem, "no manifest.json") {
		t.Errorf("install directory without a manifest: %+v", r)
	}
	if !slices.Equal(rep.Uncovered, []string{"family/forgotten"}) {
		t.Errorf("uncovered %v, want [family/forgotten]", rep.Uncovered)
	}
	if len(rep.Excused) != 1 || rep.Excused[0].Install != "draft-head" {
		t.Errorf("excused %v, want draft-head only", rep.Excused)
	}
	if !slices.Equal(rep.NotChecked, []string{"absent-a", "absent-b"}) {
		t.Errorf("not checked %v", rep.NotChecked)
	}
	if rep.Recorded != 1 || rep.Failed != 1 || rep.OK() {
		t.Errorf("recorded %d OK %v: an uncovered install must fail the gate", rep.Recorded, rep.OK())
	}
	if len(rep.ModelsDirChanges) != 0 {
		t.Errorf("models directory changed: %v", rep.ModelsDirChanges)
	}
}

// TestGateDetectsModelsDirWrites: anything the gate writes under the models
// directory fails it, named.
func TestGateDetectsModelsDirWrites(t *testing.T) {
	tests := []struct {
		name  string
		touch func(t *testing.T, models string)
		want  string
	}{
		{"file added", func(t *testing.T, models string) {
			writeFile(t, filepath.Join(models, "m", "experts", "cache.tmp"), "x")
		}, "m/experts/cache.tmp: added"},
		{"receipt rewritten", func(t *testing.T, models string) {
			p := filepath.Join(models, "m", "verified-install.json")
			raw, _ := os.ReadFile(p)
			writeFile(t, p, strings.Replace(string(raw), "nvmai-verify tests", "nvmai-verify TESTS", 1))
		}, "m/verified-install.json: was"},
		{"entry removed", func(t *testing.T, models string) { remove(t, filepath.Join(models, "m", "config.json")) }, "m/config.json: removed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			models := t.TempDir()
			copyTree(t, filepath.Join(embeddedModels(t), "tiny-moe-4bit"), filepath.Join(models, "m"))
			ts := &Targets{Targets: []Target{{Name: "m", Install: "m", Bits: 4, Prompt: "Once", Tokens: 1}}}
			afterTargets = func(dir string) { tc.touch(t, dir) }
			defer func() { afterTargets = nil }()
			rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: t.TempDir(), Targets: ts, Record: true})
			if rep.OK() || !slices.ContainsFunc(rep.ModelsDirChanges, func(c string) bool { return strings.HasPrefix(c, tc.want) }) {
				t.Errorf("changes %v, want one starting %q and a failed gate", rep.ModelsDirChanges, tc.want)
			}
		})
	}
}

func TestGateRefusesBadDirectories(t *testing.T) {
	ts := &Targets{}
	good := t.TempDir()
	install := installCopy(t, 4)
	file := filepath.Join(good, "file")
	writeFile(t, file, "x")
	for _, tc := range []struct {
		name string
		opt  GateOptions
		want string
	}{
		{"missing models dir", GateOptions{ModelsDir: filepath.Join(good, "absent"), GoldenDir: good, Targets: ts},
			"--models-dir " + filepath.Join(good, "absent") + " does not exist (create installs there"},
		{"models dir is a file", GateOptions{ModelsDir: file, GoldenDir: good, Targets: ts}, "is a file, not a directory"},
		{"missing golden dir", GateOptions{ModelsDir: good, GoldenDir: filepath.Join(good, "absent"), Targets: ts},
			"(run from the repository root or pass --golden-dir)"},
		{"models dir is an install", GateOptions{ModelsDir: install, GoldenDir: good, Targets: ts},
			"is an install, not a directory of installs: pass the directory that holds it (--models-dir " + filepath.Dir(install) + ")"},
		{"no targets", GateOptions{ModelsDir: good, GoldenDir: good}, "no golden targets"},
		{"unknown --only", GateOptions{ModelsDir: good, GoldenDir: good, Targets: &Targets{Targets: []Target{{Name: "a"}}}, Only: []string{"b"}},
			`--only: no target "b"; the targets are a`},
	} {
		_, err := Gate(context.Background(), tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestReadTargetsMissingSaysWhere(t *testing.T) {
	_, err := ReadTargets(filepath.Join("benchmark", "golden", TargetsFile))
	if err == nil || !strings.Contains(err.Error(), "(run from the repository root or pass --golden-dir)") {
		t.Errorf("got %v", err)
	}
}

// --only runs the named targets and leaves coverage alone (an install no
// target covers does not fail it); every install found is reported.
func TestGateOnly(t *testing.T) {
	models := modelsWith(t, map[string]string{"m4": "tiny-moe-4bit", "m8": "tiny-moe-8bit", "extra": "tiny-moe-4bit"})
	ts := &Targets{Targets: []Target{
		{Name: "m4", Install: "m4", Bits: 4, Prompt: "Once upon a", Tokens: 4},
		{Name: "m8", Install: "m8", Bits: 8, Prompt: "Once upon a", Tokens: 4},
	}}
	rep := runGate(t, GateOptions{ModelsDir: models, GoldenDir: t.TempDir(), Targets: ts, Record: true, Only: []string{"m8"}, Threads: 2})
	if len(rep.Results) != 1 || rep.Results[0].Target != "m8" || rep.Recorded != 1 || len(rep.Uncovered) != 0 || rep.CoverageChecked || !rep.OK() {
		t.Errorf("%+v", rep)
	}
	if !slices.Equal(rep.Installs, []string{"extra", "m4", "m8"}) {
		t.Errorf("installs %v", rep.Installs)
	}
	full := runGate(t, GateOptions{ModelsDir: models, GoldenDir: t.TempDir(), Targets: ts, Record: true, Threads: 2})
	if !full.CoverageChecked || !slices.Equal(full.Uncovered, []string{"extra"}) || full.OK() {
		t.Errorf("without --only: %+v", full)
	}
}

// Ctrl-C stops the gate between targets and inside a generation: the
// cancellation is returned (exit 130), never reported as a failed target.
func TestGateStopsWhenCancelled(t *testing.T) {
	models := modelsWith(t, map[string]string{"m4": "tiny-moe-4bit", "m8": "tiny-moe-8bit"})
	long := &Targets{Targets: []Target{
		{Name: "m4", Install: "m4", Bits: 4, Prompt: "Once upon a", Tokens: maxGoldenTokens},
		{Name: "m8", Install: "m8", Bits: 8, Prompt: "Once upon a", Tokens: maxGoldenTokens},
	}}
	short := &Targets{Targets: []Target{
		{Name: "m4", Install: "m4", Bits: 4, Prompt: "Once upon a", Tokens: 2},
		{Name: "m8", Install: "m8", Bits: 8, Prompt: "Once upon a", Tokens: 2},
	}}
	t.Run("between targets", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var seen []string
		_, err := Gate(ctx, GateOptions{ModelsDir: models, GoldenDir: t.TempDir(), Targets: short, Record: true, Threads: 2,
			OnResult: func(r TargetResult) { seen = append(seen, r.Target); cancel() }})
		if !errors.Is(err, context.Canceled) || !slices.Equal(seen, []string{"m4"}) {
			t.Errorf("got %v after %v", err, seen)
		}
	})
	t.Run("during a generation", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		var seen []string
		_, err := Gate(ctx, GateOptions{ModelsDir: models, GoldenDir: t.TempDir(), Targets: long, Record: true, Threads: 2,
			OnResult: func(r TargetResult) { seen = append(seen, r.Target) }})
		if !errors.Is(err, context.DeadlineExceeded) || len(seen) != 0 {
			t.Errorf("got %v after %v", err, seen)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the gate took %v to stop", took)
		}
	})
}

func TestFingerprintStableAndSensitive(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, filepath.Join(embeddedModels(t), "tiny-moe-4bit"), filepath.Join(dir, "a"))
	fp1, err := takeFingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Install(filepath.Join(dir, "a"), 2, false); err != nil {
		t.Fatal(err)
	}
	fp2, err := takeFingerprint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := fp1.changes(fp2); len(c) != 0 {
		t.Errorf("reading an install changed its fingerprint: %v", c)
	}
	if _, ok := fp1["a/verified-install.json"]; !ok || !strings.Contains(fp1["a/verified-install.json"], "sha256 ") {
		t.Errorf("receipt not hashed: %q", fp1["a/verified-install.json"])
	}
	truncate(t, filepath.Join(dir, "a", "resident.bin"), -1)
	fp3, _ := takeFingerprint(dir)
	if c := fp1.changes(fp3); len(c) != 1 || !strings.HasPrefix(c[0], "a/resident.bin: was") {
		t.Errorf("changes after truncation: %v", c)
	}
}

// TestSixteenBitGoldenAgreesWithTransformers ties the committed 16-bit
// baseline to the oracle: transformers' 48-token greedy continuation of the
// same prompt (generated without stopping at EOS, as the gate does) must be
// its prefix.
func TestSixteenBitGoldenAgreesWithTransformers(t *testing.T) {
	refsPath := filepath.Join(repoRoot(t), "..", "shared", "fixtures", "dev", "tiny-moe.refs.json")
	raw, err := os.ReadFile(refsPath)
	if err != nil {
		t.Skipf("reference fixtures not available: %v", err)
	}
	var refs struct {
		Prompts []struct {
			Text       string `json:"text"`
			GreedyText string `json:"greedy_text"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &refs); err != nil {
		t.Fatal(err)
	}
	goldenDir, _ := committedGoldens(t)
	b, err := ReadBaseline(BaselinePath(goldenDir, "tiny-moe-16bit"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range refs.Prompts {
		if p.Text != b.Prompt {
			continue
		}
		if !strings.HasPrefix(b.Text, p.GreedyText) {
			t.Errorf("16-bit baseline\n%q\ndoes not start with transformers' greedy text\n%q", b.Text, p.GreedyText)
		}
		return
	}
	t.Fatalf("%s has no prompt %q", refsPath, b.Prompt)
}
