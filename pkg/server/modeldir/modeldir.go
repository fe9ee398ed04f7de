// Package modeldir serves every verified nvmai install under a directory
// as a server.Models (nvmai-run serve --models-dir): it lists them at
// start, cheaply, and loads one at a time on demand.
//
// What "verified" costs: listing reads each install's manifest (parsed and
// validated), its receipt (parsed; it must name this manifest's sha256)
// and the size of every file; an install failing any of it is logged once
// and listed nowhere. The full check — every file's sha256 against the
// receipt — runs when a model is first loaded, and is remembered by file
// identity (device, inode, size, modification time), so a switch back to
// a model whose files did not change does not hash tens of GB again.
package modeldir

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/receipt"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/server"
)

// maxDepth bounds how deep installs are looked for (org/name/variant…).
const maxDepth = 4

// maxInstalls bounds the listing: a directory with more is a mistake.
const maxInstalls = 256

// Options configures a Set.
type Options struct {
	Dir     string
	Load    runtime.Options       // how each model loads (threads, expert cache, backend)
	Runtime server.RuntimeOptions // each engine's options; ModelID and MaxContext are set per model
	// MaxContext caps each model's context (0: each model's own).
	MaxContext int
	// Notice receives one line per install left out (and per entry of Dir
	// not searched: a link outside Dir, a second path to a directory, a
	// manifest.json that is not a regular file), and the footprint of each
	// model loaded; nil discards them.
	Notice func(string)
	// Renderer picks a loaded model's chat template (default
	// server.InstallRenderer).
	Renderer func(e *runtime.Engine) (server.Renderer, error)
}

// Set is the installs under a directory, at most one loaded.
type Set struct {
	opt  Options
	list []server.ModelInfo
	dirs map[string]string // id → install directory

	mu       sync.Mutex
	loaded   map[string]loadedModel
	verified map[string]string // file path → identity its sha256 was checked at
}

type loadedModel struct {
	e  *runtime.Engine
	re *server.RuntimeEngine
}

// Open lists the installs under opt.Dir.
func Open(opt Options) (*Set, error) {
	if opt.Renderer == nil {
		opt.Renderer = server.InstallRenderer
	}
	s := &Set{opt: opt, dirs: map[string]string{}, loaded: map[string]loadedModel{}, verified: map[string]string{}}
	rels, err := findInstalls(opt.Dir, s.note)
	if err != nil {
		return nil, fmt.Errorf("--models-dir %s: %w", opt.Dir, err)
	}
	for _, rel := range rels {
		dir := filepath.Join(opt.Dir, filepath.FromSlash(rel))
		info, err := s.describe(rel, dir)
		if err != nil {
			s.note("%s is not served: %v", dir, err)
			continue
		}
		s.list = append(s.list, info)
		s.dirs[rel] = dir
	}
	if len(s.list) == 0 {
		return nil, fmt.Errorf("--models-dir %s holds no verified nvmai install (%d found); convert or install one there, or check the lines above", opt.Dir, len(rels))
	}
	return s, nil
}

// describe checks an install the cheap way and says what it serves.
func (s *Set) describe(id, dir string) (server.ModelInfo, error) {
	m, raw, err := packexperts.ReadManifest(dir)
	if err != nil {
		return server.ModelInfo{}, err
	}
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		return server.ModelInfo{}, fmt.Errorf("no valid receipt (%v); run nvmai-verify --verify-install %s", err, dir)
	}
	if rc.ManifestSHA256 != receipt.SHA256Hex(raw) {
		return server.ModelInfo{}, fmt.Errorf("the receipt is for another manifest; run nvmai-verify --verify-install %s", dir)
	}
	if probs := receipt.Check(dir, rc, false, 1); len(probs) > 0 {
		return server.ModelInfo{}, fmt.Errorf("does not match its receipt: %s (and %d more); run nvmai-verify --verify-install %s", probs[0], len(probs)-1, dir)
	}
	sampling, ctx, err := runtime.InstallDefaults(dir, m)
	if err != nil {
		return server.ModelInfo{}, err
	}
	if s.opt.MaxContext > 0 {
		ctx = min(ctx, s.opt.MaxContext)
	}
	return server.ModelInfo{ID: id, Context: ctx, Sampling: sampling, Budget: s.opt.Runtime.Budget}, nil
}

// List implements server.Models.
func (s *Set) List() []server.ModelInfo { return slices.Clone(s.list) }

// Load implements server.Models: the full receipt check (once per file
// identity), the engine, its chat template.
func (s *Set) Load(id string) (server.Engine, server.Renderer, error) {
	dir, ok := s.dirs[id]
	if !ok {
		return nil, nil, fmt.Errorf("no model %q", id)
	}
	if err := s.verify(dir); err != nil {
		return nil, nil, err
	}
	e, err := runtime.Load(dir, s.opt.Load)
	if err != nil {
		return nil, nil, err
	}
	r, err := s.opt.Renderer(e)
	if err != nil {
		e.Close()
		return nil, nil, err
	}
	info := s.info(id)
	ro := s.opt.Runtime
	ro.ModelID, ro.MaxContext = id, info.Context
	ro.TemplateSHA256 = server.TemplateSHA256(r) // one disk tier serves every install: entries are keyed by install and template
	re := server.NewRuntimeEngine(e, ro)
	s.mu.Lock()
	s.loaded[id] = loadedModel{e, re}
	s.mu.Unlock()
	if f, err := runtime.ComputeFootprint(e.Install, runtime.FootprintOptions{Experts: s.opt.Load.Experts, Device: s.opt.Load.Device, KVBits: ro.KVBits, MaxContext: ro.MaxContext, Threads: s.opt.Load.Threads}); err == nil {
		s.note("%s: %s", id, f)
	}
	return re, r, nil
}

// Unload implements server.Models: the mappings, the expert cache and the
// worker threads go now; the session, KV and prompt cache with the
// engine's last reference (the server then returns freed memory to the OS).
func (s *Set) Unload(id string) {
	s.mu.Lock()
	lm, ok := s.loaded[id]
	delete(s.loaded, id)
	s.mu.Unlock()
	if ok {
		lm.re.Close()
		lm.e.Close()
	}
}

// Close unloads whatever is loaded.
func (s *Set) Close() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.loaded))
	for id := range s.loaded {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.Unload(id)
	}
}

func (s *Set) info(id string) server.ModelInfo {
	for _, m := range s.list {
		if m.ID == id {
			return m
		}
	}
	return server.ModelInfo{}
}

// verify re-hashes the install's files whose identity changed since they
// last matched the receipt (all of them the first time).
func (s *Set) verify(dir string) error {
	rc, err := receipt.Read(filepath.Join(dir, packexperts.ReceiptFile))
	if err != nil {
		return fmt.Errorf("%s: no valid receipt (%v); run nvmai-verify --verify-install %s", dir, err, dir)
	}
	todo := &receipt.Receipt{}
	ids := map[string]string{}
	s.mu.Lock()
	for _, f := range rc.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		ids[p] = identity(p)
		if ids[p] == "" || s.verified[p] != ids[p] {
			todo.Files = append(todo.Files, f)
		}
	}
	s.mu.Unlock()
	if len(todo.Files) == 0 {
		return nil
	}
	start := time.Now()
	probs, err := receipt.CheckContext(context.Background(), dir, todo, true, goruntime.NumCPU())
	if err != nil {
		return err
	}
	if len(probs) > 0 {
		return fmt.Errorf("%s does not match its receipt: %s (and %d more); run nvmai-verify --verify-install %s", dir, probs[0], len(probs)-1, dir)
	}
	s.mu.Lock()
	for _, f := range todo.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		s.verified[p] = ids[p]
	}
	s.mu.Unlock()
	s.note("%s: %d files match their receipt's sha256 (%.1fs)", dir, len(todo.Files), time.Since(start).Seconds())
	return nil
}

// identity names a file's current contents as far as stat can tell ("" if
// it cannot be read): a file rewritten or replaced gets another.
func identity(p string) string {
	fi, err := os.Stat(p)
	if err != nil {
		return ""
	}
	id := fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id += fmt.Sprintf(":%d:%d", st.Dev, st.Ino)
	}
	return id
}

func (s *Set) note(format string, args ...any) {
	if s.opt.Notice != nil {
		s.opt.Notice(fmt.Sprintf(format, args...))
	}
}

// findInstalls lists, relative to root with '/' separators and sorted,
// every directory holding a manifest.json: those are the model ids.
// Hidden entries (a converter's staging folder) are skipped, and an
// install's own subfolders are not searched.
//
// A symbolic link to a directory is followed only where it resolves inside
// root, and a directory is searched once whatever the number of paths to
// it (by device and inode): a link to "/" would otherwise serve installs
// from anywhere, and a link loop would list one install under endless ids.
// Real directories are searched before links, so an install reached both
// ways keeps its real path as its id. Every entry passed over for one of
// these reasons, a manifest.json that is not a regular file (a FIFO) and a
// subdirectory that cannot be read go to note, so none is lost silently.
func findInstalls(root string, note func(format string, args ...any)) ([]string, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("not a directory")
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	if realRoot, err = filepath.Abs(realRoot); err != nil {
		return nil, err
	}
	type link struct {
		rel   string
		depth int
	}
	var out []string
	var links []link               // symbolic links to search once every real directory was
	visited := map[string]string{} // directory identity → the first rel it was searched as
	var walk func(rel string, depth int, fi os.FileInfo) error
	walk = func(rel string, depth int, fi os.FileInfo) error {
		dir := filepath.Join(root, filepath.FromSlash(rel))
		key := dirKey(dir, fi)
		if first, ok := visited[key]; ok {
			note("%s is the same directory as %s (a second link or a link loop); it is searched once", dir, filepath.Join(root, filepath.FromSlash(first)))
			return nil
		}
		visited[key] = rel
		manifest := filepath.Join(dir, packexperts.ManifestFile)
		if mfi, err := os.Stat(manifest); err == nil && rel != "." {
			if mfi.Mode().IsRegular() {
				out = append(out, rel)
			} else {
				note("%s is not served: %s is not a regular file (%s)", dir, packexperts.ManifestFile, mfi.Mode().Type())
			}
			return nil
		} else if err != nil && !os.IsNotExist(err) && rel != "." {
			note("%s is not served: %v", dir, err)
			return nil
		}
		if depth >= maxDepth || len(out) > maxInstalls {
			return nil
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			if rel == "." {
				return err
			}
			note("%s is not searched: %v", dir, err)
			return nil
		}
		for _, e := range entries {
			if e.Name()[0] == '.' {
				continue
			}
			child := path.Join(rel, e.Name())
			if e.Type()&os.ModeSymlink != 0 {
				links = append(links, link{child, depth + 1})
				continue
			}
			if !e.IsDir() {
				continue
			}
			cfi, err := e.Info()
			if err != nil {
				note("%s is not searched: %v", filepath.Join(dir, e.Name()), err)
				continue
			}
			if err := walk(child, depth+1, cfi); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(".", 0, fi); err != nil {
		return nil, err
	}
	for len(links) > 0 && len(out) <= maxInstalls {
		l := links[0]
		links = links[1:]
		p := filepath.Join(root, filepath.FromSlash(l.rel))
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			note("%s is not searched: a symbolic link that does not resolve (%v)", p, err)
			continue
		}
		if target, err = filepath.Abs(target); err != nil {
			note("%s is not searched: %v", p, err)
			continue
		}
		tfi, err := os.Stat(target)
		if err != nil || !tfi.IsDir() {
			continue // a link to a file is no install, as a file is not
		}
		if r, err := filepath.Rel(realRoot, target); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			note("%s is not searched: it is a symbolic link to %s, outside %s; move or copy the install into the models directory", p, target, root)
			continue
		}
		if err := walk(l.rel, l.depth, tfi); err != nil {
			return nil, err
		}
	}
	if len(out) > maxInstalls {
		return nil, fmt.Errorf("more than %d installs; point --models-dir at a directory holding fewer", maxInstalls)
	}
	sort.Strings(out)
	return out, nil
}

// dirKey names a directory by device and inode, so two paths to it (links,
// loops) compare equal.
func dirKey(dir string, fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return real
	}
	return dir
}
