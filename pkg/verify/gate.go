package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// Golden check outcomes.
const (
	StatusPassed     = "passed"
	StatusFailed     = "failed"
	StatusRecorded   = "recorded"
	StatusNotChecked = "not-checked"
)

// GateOptions configures a run of the golden gate.
type GateOptions struct {
	ModelsDir string   // where installs live; never written
	GoldenDir string   // where baselines live; written only with Record
	Targets   *Targets // what to check
	// Only, when set, names the targets to run (scripts/demo.sh runs the
	// embedded model's three). Such a partial run does not judge coverage:
	// other installs in ModelsDir are not its business.
	Only    []string
	Record  bool // write the baselines not yet recorded; check the others
	Force   bool // with Record, replace existing baselines too
	Threads int  // compute threads (0: all cores); the text must not depend on it
	// Device is the engine the targets run on: "" or "cpu" the CPU engine,
	// "gpu" the GPU engine (registered by the command that imports it).
	// Baselines are the CPU engine's text, so Record needs the CPU engine.
	Device  string
	Machine string // recorded in new baselines (default: Machine())
	Commit  string // recorded in new baselines
	// OnResult, when set, is called as each target finishes.
	OnResult func(TargetResult)
}

// TargetResult is the outcome of one target.
type TargetResult struct {
	Target   string `json:"target"`
	Install  string `json:"install"`
	Baseline string `json:"baseline"`
	Status   string `json:"status"`
	Problem  string `json:"problem,omitempty"`
	Text     string `json:"text,omitempty"` // the generated text, when it failed or was recorded
}

// GateReport is the outcome of the gate. It passes when no target failed,
// every installed model is covered or excused, and the models directory is
// unchanged. Targets not checked do not fail it but are always listed.
type GateReport struct {
	ModelsDir  string         `json:"models_dir"`
	GoldenDir  string         `json:"golden_dir"`
	Results    []TargetResult `json:"results"`
	NotChecked []string       `json:"not_checked"`
	// Uncovered are installs (relative to ModelsDir) no target checks and no
	// exception excuses: each is a failure.
	Uncovered []string `json:"uncovered"`
	// Excused are installs present but excused, with their reasons.
	Excused []Exception `json:"excused"`
	// Installs are every install found (relative to ModelsDir); none means
	// ModelsDir is probably not the directory that holds them.
	Installs []string `json:"installs"`
	// CoverageChecked is false for a run restricted by Only.
	CoverageChecked bool `json:"coverage_checked"`
	// ModelsDirChanges lists what the run changed under ModelsDir: each is a failure.
	ModelsDirChanges []string `json:"models_dir_changes"`
	Passed           int      `json:"passed"`
	Failed           int      `json:"failed"`
	Recorded         int      `json:"recorded"`
}

// OK reports whether the gate passed.
func (r *GateReport) OK() bool {
	return r.Failed == 0 && len(r.Uncovered) == 0 && len(r.ModelsDirChanges) == 0
}

// afterTargets is a test seam: it runs between the checks and the final
// fingerprint, so a test can prove a write into the models directory fails
// the gate.
var afterTargets func(modelsDir string)

// Gate runs every target against its install, checks that every installed
// model is covered, and proves the models directory was not changed. It
// returns an error only when it cannot run at all (bad directories, unreadable
// models directory); check failures are in the report.
func Gate(ctx context.Context, opt GateOptions) (*GateReport, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	before, err := takeFingerprint(opt.ModelsDir)
	if err != nil {
		return nil, fmt.Errorf("fingerprinting the models directory: %w", err)
	}
	rep := &GateReport{ModelsDir: opt.ModelsDir, GoldenDir: opt.GoldenDir, Results: []TargetResult{},
		NotChecked: []string{}, Uncovered: []string{}, Excused: []Exception{}, Installs: []string{}, ModelsDirChanges: []string{}}
	if err := rep.checkCoverage(opt.ModelsDir, opt.Targets, len(opt.Only) == 0); err != nil {
		return nil, err
	}
	run, err := opt.selected()
	if err != nil {
		return nil, err
	}
	for _, t := range run {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		res := runTarget(ctx, &opt, t)
		// An interrupted generation is not a failure of the target: stop.
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		rep.tally(res)
		if opt.OnResult != nil {
			opt.OnResult(res)
		}
	}
	if afterTargets != nil {
		afterTargets(opt.ModelsDir)
	}
	after, err := takeFingerprint(opt.ModelsDir)
	if err != nil {
		return nil, fmt.Errorf("fingerprinting the models directory again: %w", err)
	}
	rep.ModelsDirChanges = append(rep.ModelsDirChanges, before.changes(after)...)
	return rep, nil
}

func (opt *GateOptions) check() error {
	if opt.Targets == nil {
		return errors.New("no golden targets given")
	}
	if err := checkDir("--models-dir", opt.ModelsDir, "create installs there with scripts/demo.sh, nvmai-convert or nvmai-install, or pass the directory that holds them"); err != nil {
		return err
	}
	if err := checkDir("--golden-dir", opt.GoldenDir, "run from the repository root or pass --golden-dir"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(opt.ModelsDir, packexperts.ManifestFile)); err == nil {
		return fmt.Errorf("--models-dir %s is an install, not a directory of installs: pass the directory that holds it (--models-dir %s)",
			opt.ModelsDir, filepath.Dir(filepath.Clean(opt.ModelsDir)))
	}
	if opt.Record && opt.Device != "" && opt.Device != model.CPU {
		return fmt.Errorf("--record with --engine %s: baselines are the CPU engine's text (the reference the GPU engine is checked against); record with --engine cpu, then check with --engine %s", opt.Device, opt.Device)
	}
	if opt.Machine == "" {
		opt.Machine = Machine()
	}
	return nil
}

func checkDir(flag, dir, hint string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s does not exist (%s)", flag, dir, hint)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s is a file, not a directory (%s)", flag, dir, hint)
	}
	return nil
}

// selected returns the targets to run: all, or those Only names.
func (opt *GateOptions) selected() ([]*Target, error) {
	all := opt.Targets.Targets
	var out []*Target
	if len(opt.Only) == 0 {
		for i := range all {
			out = append(out, &all[i])
		}
		return out, nil
	}
	for _, name := range opt.Only {
		i := slices.IndexFunc(all, func(t Target) bool { return t.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, t := range all {
				names[j] = t.Name
			}
			return nil, fmt.Errorf("--only: no target %q; the targets are %s", name, strings.Join(names, ", "))
		}
		out = append(out, &all[i])
	}
	return out, nil
}

func (r *GateReport) tally(res TargetResult) {
	r.Results = append(r.Results, res)
	switch res.Status {
	case StatusPassed:
		r.Passed++
	case StatusFailed:
		r.Failed++
	case StatusRecorded:
		r.Recorded++
	case StatusNotChecked:
		r.NotChecked = append(r.NotChecked, res.Target)
	}
}

// checkCoverage finds every installed model and sorts it into covered (a
// target checks it), excused, or uncovered.
func (r *GateReport) checkCoverage(modelsDir string, ts *Targets, judge bool) error {
	installs, err := findInstalls(modelsDir)
	if err != nil {
		return fmt.Errorf("looking for installs in %s: %w", modelsDir, err)
	}
	r.Installs = append(r.Installs, installs...)
	if r.CoverageChecked = judge; !judge {
		return nil
	}
	covered := map[string]bool{}
	for _, t := range ts.Targets {
		covered[t.Install] = true
	}
	reasons := map[string]string{}
	for _, e := range ts.Exceptions {
		reasons[e.Install] = e.Reason
	}
	for _, in := range installs {
		switch reason, excused := reasons[in]; {
		case covered[in]:
		case excused:
			r.Excused = append(r.Excused, Exception{Install: in, Reason: reason})
		default:
			r.Uncovered = append(r.Uncovered, in)
		}
	}
	return nil
}

// runTarget generates the target's text and compares or records it.
func runTarget(ctx context.Context, opt *GateOptions, t *Target) TargetResult {
	dir := filepath.Join(opt.ModelsDir, filepath.FromSlash(t.Install))
	res := TargetResult{Target: t.Name, Install: dir, Baseline: BaselinePath(opt.GoldenDir, t.Name)}
	fail := func(format string, args ...any) TargetResult {
		res.Status, res.Problem = StatusFailed, fmt.Sprintf(format, args...)
		return res
	}
	if _, err := os.Stat(filepath.Join(dir, packexperts.ManifestFile)); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(dir); err == nil {
			return fail("%s exists but holds no %s: a partial or damaged install; remove or reinstall it", dir, packexperts.ManifestFile)
		}
		res.Status, res.Problem = StatusNotChecked, "no install at "+dir
		return res
	}
	// With Record, a target whose baseline exists is checked like any
	// other; only --force records over it.
	record := opt.Record && opt.Force
	var want *Baseline
	if !record {
		b, err := ReadBaseline(res.Baseline)
		switch {
		case opt.Record && errors.Is(err, fs.ErrNotExist):
			record = true
		case opt.Record && err != nil:
			return fail("%v; pass --force to replace it", err)
		case errors.Is(err, fs.ErrNotExist):
			return fail("no baseline %s; record one with nvmai-verify golden --record", res.Baseline)
		case err != nil:
			return fail("%v", err)
		default:
			if diff := b.mismatch(t); diff != "" {
				return fail("%s was recorded with %s; the target changed, so record a new baseline deliberately (--record --force)", res.Baseline, diff)
			}
			want = b
		}
	}
	text, err := Generate(ctx, dir, t, opt.Threads, opt.Device)
	if err != nil {
		return fail("%v", err)
	}
	res.Text = text
	if record {
		b := &Baseline{Target: t.Name, Prompt: t.Prompt, Tokens: t.Tokens, Seed: t.Seed, Bits: t.Bits,
			Machine: opt.Machine, Commit: opt.Commit, Text: text}
		if err := writeBaseline(res.Baseline, b); err != nil {
			return fail("writing the baseline: %v", err)
		}
		res.Status = StatusRecorded
		return res
	}
	if diff := textDiff(want.Text, text); diff != "" {
		if opt.Record {
			return fail("%s; the baseline was kept (--record writes only missing ones; --force records over it, never to hide a mismatch)", diff)
		}
		return fail("%s", diff)
	}
	res.Status, res.Text = StatusPassed, ""
	return res
}

// Generate loads the install at dir and runs t's prompt greedily for exactly
// t.Tokens tokens (EOS does not stop it, so every baseline has the same
// length), returning the text. It fails when the install's width is not the
// target's. device is the engine ("" the CPU's; runtime.Options.Device).
func Generate(ctx context.Context, dir string, t *Target, threads int, device string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", context.Cause(ctx)
	}
	e, err := runtime.Load(dir, runtime.Options{Threads: threads, Device: device})
	if err != nil {
		return "", err
	}
	defer e.Close()
	if got := e.Install.Manifest.Bits; got != t.Bits {
		return "", fmt.Errorf("%s is a %d-bit install; target %s declares %d bits", dir, got, t.Name, t.Bits)
	}
	ids := e.Tokenizer.Encode(t.Prompt)
	if len(ids) == 0 {
		return "", fmt.Errorf("target %s: the prompt encodes to no tokens", t.Name)
	}
	// The float32 KV cache: the baselines are the reference precision's
	// text, which an 8-bit cache may leave after a few hundred tokens.
	sess := e.NewSession(runtime.SessionOptions{KVInitial: len(ids) + t.Tokens, KVBits: 32})
	res, err := sess.Generate(ctx, ids, runtime.GenerateOptions{
		MaxTokens: t.Tokens,
		Sampling:  sample.Params{Temperature: 0, TopP: 1, Seed: t.Seed},
		IgnoreEOS: true,
	})
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	return res.Text, nil
}
