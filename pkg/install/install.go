// Package install is what nvmai-install does: download a model's snapshot
// once (pkg/download), convert it at every requested width (pkg/convert) and
// verify each install (pkg/verify) before reporting it done. Offline (or
// with HF_HUB_OFFLINE) it converts from the Hugging Face cache alone.
package install

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/download"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/registry"
	"github.com/nvmai/nvmai/pkg/verify"
)

// Options configures an installation.
type Options struct {
	ModelsDir string // installs land in ModelsDir/NAME-Wbit
	CacheDir  string // Hugging Face hub cache ("" = $HF_HUB_CACHE or $HF_HOME/hub)
	// Client talks to the Hub (nil = download.NewClient()). Run sets its
	// Offline when Options.Offline is, and its OnRetry to Notice when nil.
	Client    *download.Client
	Progress  download.Progress
	Overwrite bool // reconvert widths that are already installed
	// Offline installs from the cache alone and makes no network request
	// (also set by HF_HUB_OFFLINE through download.NewClient).
	Offline bool
	Threads int
	// Notice receives one-line messages: retries, a moved upstream release,
	// skipped tensors. nil (nvmai-install --quiet) drops them.
	Notice func(string)
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

// ErrRevisionDiffers is wrapped when an existing install was built from
// another commit than the one asked for.
var ErrRevisionDiffers = errors.New("the install is of another revision")

// Run installs entry at widths. The revision is resolved first (from the
// cache when offline); a width already installed from that commit, with a
// receipt that verifies, is reused unless Overwrite; an install of another
// commit is refused with both named. All missing widths are converted from
// one download.
func Run(ctx context.Context, e registry.Entry, widths []int, opt Options) ([]Result, error) {
	if !e.Supported {
		return nil, fmt.Errorf("%w: %s (%s): %s", ErrUnsupported, e.Name, e.Title, e.Reason)
	}
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	existing := map[int]*packexperts.Manifest{}
	if !opt.Overwrite {
		for _, w := range widths {
			dir := Dir(opt.ModelsDir, e.Name, w)
			m, err := readInstall(dir)
			if err != nil {
				return nil, err
			}
			if m == nil {
				continue
			}
			if err := sameRepo(dir, e, m); err != nil {
				return nil, err
			}
			existing[w] = m
		}
	}
	commit := ""
	if len(existing) > 0 {
		var err error
		if commit, err = opt.resolve(ctx, e, existing); err != nil {
			return nil, err
		}
	}
	var results []Result
	var todo []int
	for _, w := range widths {
		m, ok := existing[w]
		if !ok {
			todo = append(todo, w)
			continue
		}
		r, err := reuse(ctx, Dir(opt.ModelsDir, e.Name, w), w, e, commit, m, opt.Threads)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	if len(todo) == 0 {
		return results, nil
	}
	converted, err := fetchAndConvert(ctx, e, todo, commit, opt)
	return append(results, converted...), err
}

func (o *Options) defaults() error {
	if o.ModelsDir == "" {
		o.ModelsDir = "models"
	}
	if o.Client == nil {
		o.Client = download.NewClient()
	}
	if o.Notice == nil {
		o.Notice = func(string) {}
	}
	if o.Offline {
		o.Client.Offline = true
	}
	o.Offline = o.Client.Offline
	if o.Client.OnRetry == nil {
		notice := o.Notice
		o.Client.OnRetry = func(n download.RetryNotice) { notice(n.String()) }
	}
	if o.CacheDir == "" {
		d, err := download.DefaultCacheDir()
		if err != nil {
			return err
		}
		o.CacheDir = d
	}
	return nil
}

// readInstall reads dir's manifest: nil when dir holds no install.
func readInstall(dir string) (*packexperts.Manifest, error) {
	if _, err := os.Stat(filepath.Join(dir, packexperts.ManifestFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	m, _, err := packexperts.ReadManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (run nvmai-verify --verify-install %s); pass --overwrite to rebuild it", dir, err, dir)
	}
	return m, nil
}

// resolve finds the commit e.Revision names now: refs/<revision> in the
// cache when offline, else the Hub's answer. A commit the existing installs
// were built from needs no answer: commits do not move.
func (o *Options) resolve(ctx context.Context, e registry.Entry, existing map[int]*packexperts.Manifest) (string, error) {
	if download.IsCommit(e.Revision) && allBuiltFrom(existing, e.Revision) {
		return e.Revision, nil
	}
	if o.Offline {
		commit, err := download.LocalCommit(o.CacheDir, e.Repo, e.Revision)
		if err != nil {
			return "", fmt.Errorf("%w; the existing install was built from commit %s: pass --revision %s to check it offline",
				err, anyCommit(existing), anyCommit(existing))
		}
		return commit, nil
	}
	commit, err := o.Client.ResolveRevision(ctx, e.Repo, e.Revision)
	if err != nil {
		return "", o.explain(err, e, slices.Sorted(maps.Keys(existing)))
	}
	return commit, nil
}

func allBuiltFrom(existing map[int]*packexperts.Manifest, commit string) bool {
	for _, m := range existing {
		if m.Source.Revision != commit {
			return false
		}
	}
	return true
}

func anyCommit(existing map[int]*packexperts.Manifest) string {
	for _, m := range existing {
		return m.Source.Revision
	}
	return ""
}

// sameRepo refuses an install at dir that is not of e's repository.
func sameRepo(dir string, e registry.Entry, m *packexperts.Manifest) error {
	switch {
	case m.Source.Repo == "":
		return fmt.Errorf("%s holds %s converted from a local folder, not %s; pass --overwrite to replace it, or choose another --models-dir",
			dir, m.ModelID, e.Repo)
	case !strings.EqualFold(m.Source.Repo, e.Repo):
		return fmt.Errorf("%s holds an install of %s, not %s; pass --overwrite to replace it, or choose another --models-dir",
			dir, m.Source.Repo, e.Repo)
	}
	return nil
}

// reuse checks that the install at dir (of e's repository) was built from
// commit and verifies; anything else is refused with what differs.
func reuse(ctx context.Context, dir string, w int, e registry.Entry, commit string, m *packexperts.Manifest, threads int) (Result, error) {
	if m.Source.Revision != commit {
		asked := fmt.Sprintf("revision %s is commit %s", e.Revision, commit)
		if e.Revision == commit {
			asked = "you asked for commit " + commit
		}
		return Result{}, fmt.Errorf("%w: %s was installed from %s at commit %s, but %s; "+
			"pass --overwrite to replace it with %s, or --revision %s to keep it",
			ErrRevisionDiffers, dir, e.Repo, orUnknown(m.Source.Revision), asked, shortCommit(commit), orUnknown(m.Source.Revision))
	}
	rep, err := verify.CheckInstall(ctx, dir, verify.InstallOptions{Threads: threads})
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if err == nil && !rep.OK() {
		err = fmt.Errorf("%v", rep.Problems[0])
	}
	if err != nil {
		return Result{}, fmt.Errorf("%s exists but does not verify (%v; run nvmai-verify --verify-install %s); pass --overwrite to rebuild it", dir, err, dir)
	}
	return Result{Width: w, Dir: dir, Reused: true, Commit: commit}, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12] + "…"
	}
	return c
}

func fetchAndConvert(ctx context.Context, e registry.Entry, widths []int, commit string, opt Options) ([]Result, error) {
	targets := make([]convert.Target, len(widths))
	for i, w := range widths {
		targets[i] = convert.Target{Bits: w, Dir: Dir(opt.ModelsDir, e.Name, w)}
		// Refused targets are found before a download that may take an hour.
		if err := convert.CheckOutput(targets[i].Dir, opt.Overwrite); err != nil {
			return nil, err
		}
	}
	snap, err := fetch(ctx, e, widths, commit, opt)
	if err != nil {
		return nil, err
	}
	_, err = convert.Run(ctx, convert.Options{
		Input: snap.Dir, Targets: targets, Overwrite: opt.Overwrite, ModelID: e.Name,
		Repo: e.Repo, Revision: snap.Commit, Threads: opt.Threads, Tool: "nvmai-install", Notice: opt.Notice,
	})
	if err != nil {
		return nil, err
	}
	return verifyAll(ctx, targets, snap.Commit, opt.Threads)
}

// fetch makes sure the snapshot is in the cache (downloading what is
// missing, unless offline) after checking the models directory has room.
func fetch(ctx context.Context, e registry.Entry, widths []int, commit string, opt Options) (*download.Snapshot, error) {
	if opt.Offline {
		snap, err := download.LocalSnapshot(ctx, opt.CacheDir, e.Repo, e.Revision, Wanted, opt.Notice)
		if err != nil {
			return nil, err
		}
		return snap, checkModelsSpace(opt, snap.Files, widths)
	}
	if commit == "" {
		var err error
		if commit, err = opt.Client.ResolveRevision(ctx, e.Repo, e.Revision); err != nil {
			return nil, opt.explain(err, e, widths)
		}
	}
	if e.CommitPrefix != "" && !strings.HasPrefix(commit, e.CommitPrefix) {
		opt.Notice(fmt.Sprintf("note: %s@%s is commit %s, not the %s… NVMAI pinned; the upstream release has moved", e.Repo, e.Revision, commit, e.CommitPrefix))
	}
	files, err := opt.Client.ListFiles(ctx, e.Repo, commit)
	if err != nil {
		return nil, opt.explain(err, e, widths)
	}
	if err := checkModelsSpace(opt, files, widths); err != nil {
		return nil, err
	}
	ref := ""
	if !download.IsCommit(e.Revision) {
		ref = e.Revision
	}
	snap, err := opt.Client.Snapshot(ctx, e.Repo, commit, download.SnapshotOptions{
		Include: Wanted, CacheDir: opt.CacheDir, Progress: opt.Progress, Ref: ref})
	if err != nil {
		return nil, opt.explain(err, e, widths)
	}
	return snap, nil
}

func checkModelsSpace(opt Options, files []download.RemoteFile, widths []int) error {
	if err := os.MkdirAll(opt.ModelsDir, 0o755); err != nil {
		return err
	}
	err := opt.Client.CheckFreeSpace(opt.ModelsDir, installBytes(files, widths))
	var dse *download.DiskSpaceError
	if errors.As(err, &dse) {
		dse.Elsewhere = "choose another --models-dir"
		return fmt.Errorf("not enough space for the installs in %s: %w", opt.ModelsDir, err)
	}
	return err
}

// explain adds to a network failure what the cache offers instead: the
// snapshot to convert by hand or with --offline, or that there is none.
func (o *Options) explain(err error, e registry.Entry, widths []int) error {
	var ne *download.NetworkError
	if !errors.As(err, &ne) {
		return err
	}
	commit, lerr := download.LocalCommit(o.CacheDir, e.Repo, e.Revision)
	if lerr != nil {
		return fmt.Errorf("%w. Nothing of %s@%s is in the Hugging Face cache (%s), so --offline cannot help yet",
			err, e.Repo, e.Revision, download.RepoCacheDir(o.CacheDir, e.Repo))
	}
	snap := download.SnapshotDir(o.CacheDir, e.Repo, commit)
	return fmt.Errorf("%w. The snapshot of %s@%s (commit %s) is in the cache: install it with --offline "+
		"(or HF_HUB_OFFLINE=1), or convert it by hand: nvmai-convert --input %s %s",
		err, e.Repo, e.Revision, shortCommit(commit), snap, o.convertArgs(e, widths))
}

// convertArgs are the nvmai-convert flags that write the installs Run would.
func (o *Options) convertArgs(e registry.Entry, widths []int) string {
	bits := make([]string, len(widths))
	for i, w := range widths {
		bits[i] = strconv.Itoa(w)
	}
	out := filepath.Join(o.ModelsDir, e.Name)
	if len(widths) == 1 {
		out = Dir(o.ModelsDir, e.Name, widths[0])
	}
	return fmt.Sprintf("--output %s --bits %s", out, strings.Join(bits, ","))
}

// verifyAll re-hashes every fresh install; an install that fails is reported
// with its problems, never as done.
func verifyAll(ctx context.Context, targets []convert.Target, commit string, threads int) ([]Result, error) {
	var results []Result
	var errs []error
	for _, t := range targets {
		rep, err := verify.CheckInstall(ctx, t.Dir, verify.InstallOptions{Threads: threads})
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
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
