// Package convert turns a Hugging Face snapshot into nvmai installs. It reads
// the source once, sequentially, tensor by tensor (so memory stays bounded by
// one tensor block whatever the model size), quantizes on every core, and
// writes each requested width into a staging directory that is renamed into
// place only after its receipt is written.
package convert

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/nvmai/nvmai/pkg/hf"
	"github.com/nvmai/nvmai/pkg/packexperts"
)

// Target is one install to write: a width and its final directory.
type Target struct {
	Bits int
	Dir  string
}

// Options configures a conversion.
type Options struct {
	Input     string   // snapshot directory
	Targets   []Target // one per width; see Targets
	Overwrite bool     // replace existing installs
	ModelID   string   // default: the repo when known, else the input folder name
	Repo      string   // source repo, recorded in the manifest (default: from an HF cache path)
	Revision  string   // source revision (default: from an HF cache path)
	Threads   int      // quantization workers (default: all cores)
	Tool      string   // recorded in the receipt
	// Progress, when set, is called with source bytes read so far and the total.
	Progress func(done, total int64)
	// Notice, when set, receives one-line messages about skipped or set-aside tensors.
	Notice func(msg string)
}

// Result describes one written install.
type Result struct {
	Target
	Manifest *packexperts.Manifest
}

// ErrExists is returned when a target directory exists and Overwrite is off.
var ErrExists = errors.New("install already exists")

// Targets names the installs for bits at output: a single width writes
// exactly output; several widths write output-4bit, output-8bit, output-16bit.
func Targets(output string, bits []int) []Target {
	output = filepath.Clean(output)
	if len(bits) == 1 {
		return []Target{{bits[0], output}}
	}
	ts := make([]Target, len(bits))
	for i, b := range bits {
		ts[i] = Target{b, fmt.Sprintf("%s-%dbit", output, b)}
	}
	return ts
}

// ParseBits parses "4", "8", "16" or a comma list such as "4,8".
func ParseBits(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		var b int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &b); err != nil || fmt.Sprint(b) != strings.TrimSpace(f) {
			return nil, fmt.Errorf("--bits %q: %q is not a number; use 4, 8, 16 or 4,8", s, f)
		}
		if b != 4 && b != 8 && b != 16 {
			return nil, &BitsError{b}
		}
		if seen[b] {
			return nil, fmt.Errorf("--bits %q names %d twice", s, b)
		}
		seen[b] = true
		out = append(out, b)
	}
	sort.Ints(out)
	return out, nil
}

// Run converts opt.Input into every target.
func Run(ctx context.Context, opt Options) ([]Result, error) {
	if err := opt.check(); err != nil {
		return nil, err
	}
	snap, err := hf.Open(opt.Input)
	if err != nil {
		return nil, err
	}
	c, err := newConverter(snap, &opt)
	if err != nil {
		return nil, err
	}
	defer c.cleanup()
	if err := c.stream(ctx); err != nil {
		return nil, err
	}
	return c.finish(ctx)
}

func (o *Options) check() error {
	if len(o.Targets) == 0 {
		return fmt.Errorf("no output: pass --output DIR and --bits 4, 8, 16 or 4,8")
	}
	if o.Threads <= 0 {
		o.Threads = runtime.NumCPU()
	}
	if o.Tool == "" {
		o.Tool = "nvmai-convert"
	}
	if o.Notice == nil {
		o.Notice = func(string) {}
	}
	if err := o.resolveInput(); err != nil {
		return err
	}
	seen := map[string]bool{}
	dirs := make([]string, len(o.Targets))
	for i, t := range o.Targets {
		if t.Bits != 4 && t.Bits != 8 && t.Bits != 16 {
			return &BitsError{t.Bits}
		}
		abs, err := filepath.Abs(t.Dir)
		if err != nil {
			return err
		}
		if seen[abs] {
			return fmt.Errorf("two outputs share the directory %s", t.Dir)
		}
		seen[abs] = true
		dirs[i] = t.Dir
	}
	if err := checkOverlap(o.Input, dirs); err != nil {
		return err
	}
	for _, d := range dirs {
		if err := checkTarget(d, o.Overwrite); err != nil {
			return err
		}
	}
	o.sourceIdentity()
	return nil
}

// resolveInput checks that --input names a snapshot directory, follows a
// Hugging Face repo folder to the snapshot its refs/main names, and
// recognises an nvmai install given by mistake.
func (o *Options) resolveInput() error {
	fi, err := os.Stat(o.Input)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--input %s: no such directory", o.Input)
	case err != nil:
		return fmt.Errorf("--input %s: %w", o.Input, err)
	case !fi.IsDir():
		return fmt.Errorf("--input %s is a file; pass the directory of a Hugging Face snapshot", o.Input)
	}
	if m, err := readOwnManifest(o.Input); err == nil {
		return fmt.Errorf("--input %s is an nvmai install (%s, %d-bit), not a Hugging Face snapshot; run it with nvmai-run --model %s, or convert from the snapshot it was made from", o.Input, m.ModelID, m.Bits, o.Input)
	}
	snap, commit, ok, err := hf.RepoFolderSnapshot(o.Input)
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	if ok {
		o.Notice(fmt.Sprintf("--input %s is a Hugging Face repo folder; converting its snapshot %s (refs/main)", o.Input, commit))
		o.Input = snap
	}
	return nil
}

// sourceIdentity fills Repo, Revision and ModelID from a Hugging Face cache
// path (.../models--ORG--NAME/snapshots/COMMIT) when they were not given.
func (o *Options) sourceIdentity() {
	abs, err := filepath.Abs(o.Input)
	if err == nil {
		parent := filepath.Dir(abs)
		repoDir := filepath.Base(filepath.Dir(parent))
		if filepath.Base(parent) == "snapshots" && strings.HasPrefix(repoDir, "models--") {
			if o.Repo == "" {
				o.Repo = strings.Replace(strings.TrimPrefix(repoDir, "models--"), "--", "/", 1)
			}
			if o.Revision == "" {
				o.Revision = filepath.Base(abs)
			}
		}
	}
	if o.ModelID == "" {
		o.ModelID = o.Repo
	}
	if o.ModelID == "" {
		o.ModelID = filepath.Base(filepath.Clean(o.Input))
	}
}
