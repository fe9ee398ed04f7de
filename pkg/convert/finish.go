package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/nvmai/nvmai/internal/filehash"
	"github.com/nvmai/nvmai/pkg/limits"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
)

// metadataFiles are copied from the snapshot into every install; the
// tokenizer and generation settings travel with the weights.
var metadataFiles = []struct {
	name     string
	required bool
	limit    int64
}{
	{"config.json", true, limits.SnapshotJSON},
	{"generation_config.json", false, limits.SnapshotJSON},
	{"tokenizer.json", true, limits.TokenizerJSON},
	{"tokenizer_config.json", true, limits.SnapshotJSON},
	{"special_tokens_map.json", false, limits.SnapshotJSON},
	{"chat_template.jinja", false, limits.SnapshotJSON},
}

// finish writes metadata, manifest and receipt into every staging directory
// and renames each into place.
func (c *converter) finish(ctx context.Context) ([]Result, error) {
	meta, err := c.readMetadata()
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, o := range c.outs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := c.seal(ctx, o, meta); err != nil {
			return nil, fmt.Errorf("%s: %w", o.target.Dir, err)
		}
	}
	for _, o := range c.outs {
		if err := publish(o.staging, o.target.Dir, c.opt.Overwrite); err != nil {
			return nil, err
		}
		results = append(results, Result{Target: o.target, Manifest: o.man})
	}
	c.ok = true
	return results, nil
}

type metaFile struct {
	name string
	data []byte
}

func (c *converter) readMetadata() ([]metaFile, error) {
	var out []metaFile
	for _, m := range metadataFiles {
		p := filepath.Join(c.snap.Dir, m.name)
		data, err := limits.ReadFile(p, m.limit)
		if os.IsNotExist(err) && !m.required {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, metaFile{m.name, data})
		c.sources = append(c.sources, packexperts.SourceFile{Name: m.name, Size: int64(len(data)), SHA256: receipt.SHA256Hex(data)})
	}
	for _, idx := range []string{"model.safetensors.index.json"} {
		if size, sum, err := filehash.SHA256(filepath.Join(c.snap.Dir, idx)); err == nil {
			c.sources = append(c.sources, packexperts.SourceFile{Name: idx, Size: size, SHA256: sum})
		}
	}
	sort.Slice(c.sources, func(i, j int) bool { return c.sources[i].Name < c.sources[j].Name })
	return out, nil
}

// seal completes one staging directory: payload files closed and synced,
// metadata copied, manifest validated and written, receipt written last.
func (c *converter) seal(ctx context.Context, o *output, meta []metaFile) error {
	if err := o.closeFiles(); err != nil {
		return err
	}
	for _, m := range meta {
		if err := os.WriteFile(filepath.Join(o.staging, m.name), m.data, 0o644); err != nil {
			return err
		}
	}
	o.man.Source.Files = c.sources
	for prefix, n := range c.skipped {
		o.man.Skipped = append(o.man.Skipped, packexperts.Skipped{Prefix: prefix, Count: n, Reason: "vision tower; nvmai runs the text model"})
	}
	if err := o.listFiles(meta); err != nil {
		return err
	}
	if err := o.man.Validate(); err != nil {
		return fmt.Errorf("internal error, the converter planned an invalid install: %w", err)
	}
	raw, err := EncodeManifest(o.man)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.staging, packexperts.ManifestFile), raw, 0o644); err != nil {
		return err
	}
	names := make([]string, len(o.man.Files))
	for i, f := range o.man.Files {
		names[i] = f.Name
	}
	// Hashing a large install takes a while: Ctrl-C must still stop it.
	rc, err := receipt.BuildContext(ctx, o.staging, packexperts.ManifestFile, names, c.opt.Tool, c.opt.Threads)
	if err != nil {
		return err
	}
	if err := receipt.Write(filepath.Join(o.staging, packexperts.ReceiptFile), rc); err != nil {
		return err
	}
	return syncDir(o.staging)
}

// listFiles records every payload file with its size on disk.
func (o *output) listFiles(meta []metaFile) error {
	names := []string{packexperts.ResidentFile}
	if o.man.Experts != nil {
		for _, l := range o.man.Experts.Layers {
			names = append(names, l.File)
		}
	}
	for _, t := range o.man.NGram {
		names = append(names, t.File)
	}
	if o.man.Draft != nil {
		names = append(names, o.man.Draft.File)
	}
	for _, m := range meta {
		names = append(names, m.name)
	}
	sort.Strings(names)
	o.man.Files = nil
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(o.staging, filepath.FromSlash(n)))
		if err != nil {
			return err
		}
		o.man.Files = append(o.man.Files, packexperts.Payload{Name: n, Size: fi.Size()})
	}
	return nil
}

// EncodeManifest is the one encoding of a manifest: indented JSON with a
// trailing newline (the receipt hashes these exact bytes).
func EncodeManifest(m *packexperts.Manifest) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// testHookAfterExchange, when set, runs once publish has swapped the new
// install in and before it removes the old one: a test's stand-in for a
// kill at that point.
var testHookAfterExchange func() error

// exchangeDirs is exchange; tests replace it to take the fallback path.
var exchangeDirs = exchange

// publish renames a sealed staging directory to final. An existing final
// directory (allowed only with overwrite, and only when it is an nvmai
// install: checked again here, as it may have changed during the
// conversion) is swapped with the staging directory in one atomic
// renameat2(RENAME_EXCHANGE), so at every instant final holds either the
// old install or the new one; the old one, now under the staging name, is
// removed afterwards (by the sweep of dead writers' staging, if this
// process dies first). Where the filesystem or system cannot exchange, the
// old install is renamed aside to .NAME.old-PID first; a kill between that
// rename and the next leaves final missing, and the old install there for
// nvmai-install to point at until a later conversion to final succeeds.
func publish(staging, final string, overwrite bool) error {
	if err := checkTarget(final, overwrite); err != nil {
		return err
	}
	parent := filepath.Dir(final)
	if _, err := os.Lstat(final); err != nil {
		if err := os.Rename(staging, final); err != nil {
			return err
		}
		if err := syncDir(parent); err != nil {
			return err
		}
		removeReplaced(final)
		return nil
	}
	err := exchangeDirs(staging, final)
	if errors.Is(err, errExchangeUnsupported) {
		return publishByTwoRenames(staging, final)
	}
	if err != nil {
		return fmt.Errorf("swapping the new install into %s: %w", final, err)
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	if testHookAfterExchange != nil {
		if err := testHookAfterExchange(); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("%s is in place; removing the install it replaced (now %s): %w", final, staging, err)
	}
	removeReplaced(final)
	return nil
}

// publishByTwoRenames is publish where renameat2(RENAME_EXCHANGE) is not
// available.
func publishByTwoRenames(staging, final string) error {
	old := filepath.Join(filepath.Dir(final), replacedPrefix(final)+strconv.Itoa(os.Getpid()))
	if err := os.Rename(final, old); err != nil {
		return fmt.Errorf("moving the existing %s aside: %w", final, err)
	}
	if err := os.Rename(staging, final); err != nil {
		os.Rename(old, final)
		return err
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return err
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("%s is in place; removing the install it replaced (now %s): %w", final, old, err)
	}
	removeReplaced(final)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
