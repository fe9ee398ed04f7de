package download

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sync/errgroup"
)

// SnapshotOptions says which files to fetch and where.
type SnapshotOptions struct {
	// Include selects files by repository path; nil includes every file.
	Include func(path string) bool
	// CacheDir is the hub cache root ($HF_HOME/hub); "" means
	// DefaultCacheDir().
	CacheDir string
	// Progress receives byte counts and per-file events; nil is silent.
	Progress Progress
	// ReserveBytes is space the caller will need on the cache's filesystem
	// after the download (e.g. an install written next to it); the
	// preflight demands it on top of the bytes still to fetch.
	ReserveBytes uint64
	// Ref, when rev is a commit, is the branch or tag it was resolved from:
	// refs/<Ref> then records the commit, as it does when rev is a branch,
	// so a later offline run finds it.
	Ref string
}

// Snapshot is a downloaded, verified set of files at one commit.
type Snapshot struct {
	Repo   string
	Commit string
	// Dir is snapshots/<commit> in the cache: read Files from here.
	Dir   string
	Files []RemoteFile
}

// blobTask is one blob to place; several repository paths may share it.
type blobTask struct {
	file    RemoteFile // the first path with this content
	paths   []string
	reused  bool
	partial *partial // an interrupted download found while planning
}

// Snapshot downloads every included file of repo at rev into the Hugging
// Face cache layout and returns the snapshot folder. rev is resolved to a
// commit first and the commit is used for every request. Files already in
// the cache with the right size and hash are reused, not downloaded; an
// interrupted download resumes from its verified chunks. On error (or
// cancellation) nothing unverified is ever given a final name, and partial
// downloads are left to resume.
func (c *Client) Snapshot(ctx context.Context, repo, rev string, opts SnapshotOptions) (*Snapshot, error) {
	if rev == "" {
		rev = "main"
	}
	if c.ChunkSize < minChunkSize {
		return nil, fmt.Errorf("chunk size %d is below the minimum %d", c.ChunkSize, minChunkSize)
	}
	progress := opts.Progress
	if progress == nil {
		progress = NopProgress{}
	}
	cacheDir := opts.CacheDir
	if cacheDir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cacheDir = d
	}
	if c.Offline {
		return LocalSnapshot(ctx, cacheDir, repo, rev, opts.Include, nil)
	}
	commit, err := c.ResolveRevision(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	all, err := c.ListFiles(ctx, repo, commit)
	if err != nil {
		return nil, err
	}
	var files []RemoteFile
	for _, f := range all {
		if opts.Include == nil || opts.Include(f.Path) {
			files = append(files, f)
		}
	}
	cache := newRepoCache(cacheDir, repo)
	if err := os.MkdirAll(cache.blobsDir(), 0o755); err != nil {
		return nil, fmt.Errorf("create the cache: %w", err)
	}
	tasks, err := groupByBlob(files)
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", repo, commit, err)
	}
	defer suspendAll(tasks)
	if err := c.plan(cache, commit, tasks); err != nil {
		return nil, err
	}
	if err := c.preflight(cacheDir, tasks, opts.ReserveBytes); err != nil {
		return nil, err
	}
	reportPlan(progress, tasks)
	if err := c.fetchAll(ctx, repo, commit, cache, tasks, progress); err != nil {
		return nil, err
	}
	ref := rev
	if IsCommit(rev) {
		ref = opts.Ref
	}
	if ref != "" && !IsCommit(ref) {
		if err := validateRevision(ref); err != nil {
			return nil, err
		}
		if err := cache.writeRef(ref, commit); err != nil {
			return nil, fmt.Errorf("record refs/%s: %w", ref, err)
		}
	}
	return &Snapshot{Repo: repo, Commit: commit, Dir: cache.snapshotDir(commit), Files: files}, nil
}

func groupByBlob(files []RemoteFile) ([]*blobTask, error) {
	byBlob := map[string]*blobTask{}
	var tasks []*blobTask
	for _, f := range files {
		b := f.blobName()
		if t, ok := byBlob[b]; ok {
			if t.file.Size != f.Size {
				return nil, fmt.Errorf("%s and %s share a hash but not a size", t.file.Path, f.Path)
			}
			t.paths = append(t.paths, f.Path)
			continue
		}
		t := &blobTask{file: f, paths: []string{f.Path}}
		byBlob[b] = t
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// plan marks the blobs already in the cache and opens interrupted downloads.
func (c *Client) plan(cache repoCache, commit string, tasks []*blobTask) error {
	for _, t := range tasks {
		if n := chunkCount(t.file.Size, c.ChunkSize); n > maxChunksPerFile {
			return fmt.Errorf("%s: %d bytes would take %d chunks of %d bytes, more than %d: raise the chunk size",
				t.file.Path, t.file.Size, n, c.ChunkSize, maxChunksPerFile)
		}
		reused, err := reuse(cache, commit, t)
		if err != nil {
			return err
		}
		if t.reused = reused; reused {
			continue
		}
		t.partial, err = openPartial(cache.blobsDir(), t.file.blobName(), t.file.Size, c.ChunkSize, false)
		if err != nil {
			return fmt.Errorf("%s: %w", t.file.Path, err)
		}
	}
	return nil
}

// reuse reports whether every path of t is already in the snapshot, or the
// blob is in the cache (then the paths are linked to it). A blob that fails
// verification is deleted: its name promises content it does not have.
func reuse(cache repoCache, commit string, t *blobTask) (bool, error) {
	all := true
	for _, p := range t.paths {
		ok, err := existingCopy(cache.snapshotPath(commit, p), withPath(t.file, p))
		if err != nil {
			return false, err
		}
		all = all && ok
	}
	if all {
		return true, nil
	}
	blob := cache.blobPath(t.file.blobName())
	ok, err := existingCopy(blob, t.file)
	if err != nil {
		return false, err
	}
	if !ok {
		if err := os.Remove(blob); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		return false, nil
	}
	return true, linkAll(cache, commit, t)
}

func withPath(f RemoteFile, p string) RemoteFile {
	f.Path = p
	return f
}

func linkAll(cache repoCache, commit string, t *blobTask) error {
	for _, p := range t.paths {
		if err := cache.link(commit, p, t.file.blobName()); err != nil {
			return err
		}
	}
	return nil
}

func suspendAll(tasks []*blobTask) {
	for _, t := range tasks {
		if t.partial != nil {
			t.partial.suspend()
			t.partial = nil
		}
	}
}

// preflight checks the cache's filesystem can hold what is left to fetch
// plus the caller's reserve. Preallocated partial files are sparse, so
// their unwritten chunks still count as needed.
func (c *Client) preflight(cacheDir string, tasks []*blobTask, reserve uint64) error {
	need := reserve
	for _, t := range tasks {
		if t.reused {
			continue
		}
		left := t.file.Size
		if t.partial != nil {
			left -= t.partial.doneBytes()
		}
		need += uint64(left)
	}
	return c.CheckFreeSpace(cacheDir, need)
}

// CheckFreeSpace returns a *DiskSpaceError if the filesystem holding path
// has fewer than need bytes available.
func (c *Client) CheckFreeSpace(path string, need uint64) error {
	if need == 0 {
		return nil
	}
	free := c.FreeSpace
	if free == nil {
		free = statfsFree
	}
	avail, err := free(path)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check free space: %w", err)
	}
	if avail < need {
		return &DiskSpaceError{Path: path, Need: need, Free: avail}
	}
	return nil
}

func reportPlan(progress Progress, tasks []*blobTask) {
	var p Plan
	for _, t := range tasks {
		if t.reused {
			p.ReusedFiles += len(t.paths)
			continue
		}
		p.Files += len(t.paths)
		p.Bytes += t.file.Size
		if t.partial != nil {
			p.ResumedBytes += t.partial.doneBytes()
		}
	}
	progress.Plan(p)
	for _, t := range tasks {
		if t.reused {
			for _, path := range t.paths {
				progress.FileDone(path, t.file.Size, true)
			}
		}
	}
}

// fetchAll downloads the blobs not reused, up to c.Parallel files at once
// sharing c.Parallel request slots.
func (c *Client) fetchAll(ctx context.Context, repo, commit string, cache repoCache,
	tasks []*blobTask, progress Progress) error {
	parallel := max(c.Parallel, 1)
	slots := make(chan struct{}, parallel)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, t := range tasks {
		if t.reused {
			continue
		}
		if gctx.Err() != nil {
			break
		}
		p := t.partial
		t.partial = nil // owned by the goroutine from here on
		g.Go(func() error { return c.fetchBlob(gctx, repo, commit, cache, t, p, slots, progress) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return context.Cause(ctx)
}

// fetchBlob downloads, verifies and places one blob, then links its paths.
func (c *Client) fetchBlob(ctx context.Context, repo, commit string, cache repoCache, t *blobTask,
	p *partial, slots chan struct{}, progress Progress) (err error) {
	f := t.file
	if ctx.Err() != nil {
		if p != nil {
			p.suspend()
		}
		return context.Cause(ctx)
	}
	if p == nil {
		if p, err = openPartial(cache.blobsDir(), f.blobName(), f.Size, c.ChunkSize, true); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	placed := false
	defer func() {
		if !placed {
			p.suspend()
		}
	}()
	if len(p.missingChunks()) > 0 {
		loc, err := c.locate(ctx, repo, commit, f)
		if err != nil {
			return err
		}
		src := &sourceURL{current: loc, relocate: func(ctx context.Context) (string, error) {
			return c.locate(ctx, repo, commit, f)
		}}
		if err := c.transfer(ctx, p, src, f.Path, slots, progress); err != nil {
			return err
		}
	}
	placed = true // placeBlob closes or deletes p whatever happens
	if err := placeBlob(p, cache.blobPath(f.blobName()), f); err != nil {
		return err
	}
	if err := linkAll(cache, commit, t); err != nil {
		return err
	}
	for _, path := range t.paths {
		progress.FileDone(path, f.Size, false)
	}
	return nil
}
