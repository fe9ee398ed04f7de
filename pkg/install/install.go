// Package install is what nvmai-install does: download a model's snapshot
// once (pkg/download), convert it at every requested width (pkg/convert) and
// verify each install (pkg/verify) before reporting it done.
package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/download"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/registry"
	"github.com/nvmai/nvmai/pkg/verify"
)

// Options configures an installation.
type Options struct {
	ModelsDir string           // installs land in ModelsDir/NAME-Wbit
	CacheDir  string           // Hugging Face hub cache ("" = $HF_HOME/hub)
	Client    *download.Client // nil = download.NewClient()
	Progress  download.Progress
	Overwrite bool // reconvert widths that are already installed
	Threads   int
	Notice    func(string) // one-line messages (reused snapshot, pinned commit, …)
}

// Result is one verified install.
type Result struct {
	Width   int
	Dir     string
	Reused  bool // it was already installed and verified; nothing was written
	Commit  string
	Problem string
}

// Dir is where the install of a registry entry at width lands.
func Dir(modelsDir, name string, width int) string {
	return filepath.Join(modelsDir, fmt.Sprintf("%s-%dbit", name, width))
}

// ErrUnsupported is returned for registry entries the runtime cannot run.
var ErrUnsupported = registry.ErrUnsupported

// Run installs entry at widths. A width already installed (with a receipt
// that verifies) is reused unless Overwrite; all missing widths are
// converted from one download.
func Run(ctx context.Context, e registry.Entry, widths []int, opt Options) ([]Result, error) {
	if !e.Supported {
		return nil, fmt.Errorf("%w: %s (%s): %s", ErrUnsupported, e.Name, e.Title, e.Reason)
	}
	opt.defaults()
	var results []Result
	var todo []int
	for _, w := range widths {
		dir := Dir(opt.ModelsDir, e.Name, w)
		if !opt.Overwrite && installed(dir) {
			rep, err := verify.Install(dir, opt.Threads, false)
			if err == nil && rep.OK() {
				opt.Notice(fmt.Sprintf("%s is already installed and verifies; pass --overwrite to rebuild it", dir))
				results = append(results, Result{Width: w, Dir: dir, Reused: true})
				continue
			}
			return nil, fmt.Errorf("%s exists but does not verify (run nvmai-verify --verify-install %s); pass --overwrite to rebuild it", dir, dir)
		}
		todo = append(todo, w)
	}
	if len(todo) == 0 {
		return results, nil
	}
	converted, err := fetchAndConvert(ctx, e, todo, opt)
	return append(results, converted...), err
}

func (o *Options) defaults() {
	if o.ModelsDir == "" {
		o.ModelsDir = "models"
	}
	if o.Client == nil {
		o.Client = download.NewClient()
	}
	if o.Notice == nil {
		o.Notice = func(string) {}
	}
}

func installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, packexperts.ManifestFile))
	return err == nil
}

func fetchAndConvert(ctx context.Context, e registry.Entry, widths []int, opt Options) ([]Result, error) {
	commit, err := opt.Client.ResolveRevision(ctx, e.Repo, e.Revision)
	if err != nil {
		return nil, err
	}
	if e.CommitPrefix != "" && !strings.HasPrefix(commit, e.CommitPrefix) {
		opt.Notice(fmt.Sprintf("note: %s@%s is commit %s, not the %s… NVMAI pinned; the upstream release has moved", e.Repo, e.Revision, commit, e.CommitPrefix))
	}
	files, err := opt.Client.ListFiles(ctx, e.Repo, commit)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.ModelsDir, 0o755); err != nil {
		return nil, err
	}
	if err := opt.Client.CheckFreeSpace(opt.ModelsDir, installBytes(files, widths)); err != nil {
		return nil, fmt.Errorf("not enough space for the installs in %s: %w", opt.ModelsDir, err)
	}
	snap, err := opt.Client.Snapshot(ctx, e.Repo, commit, download.SnapshotOptions{Include: Wanted, CacheDir: opt.CacheDir, Progress: opt.Progress})
	if err != nil {
		return nil, err
	}
	targets := make([]convert.Target, len(widths))
	for i, w := range widths {
		targets[i] = convert.Target{Bits: w, Dir: Dir(opt.ModelsDir, e.Name, w)}
	}
	_, err = convert.Run(ctx, convert.Options{
		Input: snap.Dir, Targets: targets, Overwrite: opt.Overwrite, ModelID: e.Name,
		Repo: e.Repo, Revision: snap.Commit, Threads: opt.Threads, Tool: "nvmai-install", Notice: opt.Notice,
	})
	if err != nil {
		return nil, err
	}
	return verifyAll(targets, snap.Commit, opt.Threads)
}

// verifyAll re-hashes every fresh install; an install that fails is reported
// with its problems, never as done.
func verifyAll(targets []convert.Target, commit string, threads int) ([]Result, error) {
	var results []Result
	var errs []error
	for _, t := range targets {
		rep, err := verify.Install(t.Dir, threads, false)
		if err == nil && !rep.OK() {
			err = fmt.Errorf("%s failed verification: %s", t.Dir, rep.Problems[0])
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		results = append(results, Result{Width: t.Bits, Dir: t.Dir, Commit: commit})
	}
	return results, errors.Join(errs...)
}

// installBytes estimates the disk the installs need: the bf16 weights shrink
// to about bits/16 of their size plus 1/16 for group scales and biases.
func installBytes(files []download.RemoteFile, widths []int) uint64 {
	var weights int64
	for _, f := range files {
		if strings.HasSuffix(f.Path, ".safetensors") {
			weights += f.Size
		}
	}
	var need int64
	for _, w := range widths {
		need += weights * int64(w+1) / 16
	}
	return uint64(need)
}

// Wanted selects the files of a repository an install needs: configs,
// tokenizer files and safetensors weights (not READMEs, images or other
// formats).
func Wanted(p string) bool {
	if strings.Contains(p, "/") {
		return false
	}
	switch p {
	case "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"special_tokens_map.json", "chat_template.jinja", "model.safetensors.index.json":
		return true
	}
	return path.Ext(p) == ".safetensors"
}

// Status is one line of the registry status table.
type Status struct {
	Entry     registry.Entry
	Installed map[int]string // width → dir, for widths present on disk
}

// Statuses lists every registry entry with the widths installed under modelsDir.
func Statuses(modelsDir string) []Status {
	var out []Status
	for _, e := range registry.All() {
		s := Status{Entry: e, Installed: map[int]string{}}
		for _, w := range []int{4, 8, 16} {
			if d := Dir(modelsDir, e.Name, w); installed(d) {
				s.Installed[w] = d
			}
		}
		out = append(out, s)
	}
	return out
}

// CustomEntry describes a repository that is not in the registry, for
// `nvmai-install --repo ORG/NAME`.
func CustomEntry(repo, revision string) (registry.Entry, error) {
	org, name, ok := strings.Cut(repo, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return registry.Entry{}, fmt.Errorf("--repo %q: want ORG/NAME", repo)
	}
	if revision == "" {
		revision = "main"
	}
	return registry.Entry{Name: strings.ToLower(name), Title: repo, Repo: repo, Revision: revision, Supported: true, Widths: []int{4, 8, 16}}, nil
}
