package download

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/nvmai/nvmai/pkg/limits"
)

// A partial download is two files next to the final blob:
//
//	blobs/<blob>.nvmai.incomplete  the preallocated data, written with WriteAt
//	blobs/<blob>.nvmai.journal     JSON: sha256 of every chunk already written
//
// The suffix differs from huggingface_hub's "<etag>.incomplete" on purpose:
// its releases up to 1.17 resume such a file by appending to it, which would
// corrupt our preallocated one.
const (
	partialSuffix  = ".nvmai.incomplete"
	journalSuffix  = ".nvmai.journal"
	journalVersion = 1
	// maxChunksPerFile bounds the journal: 2^20 chunks of 64 MiB is 64 TiB,
	// far past any shard; a smaller ChunkSize on a huge file is refused
	// rather than journaled in hundreds of megabytes.
	maxChunksPerFile = 1 << 20
	// maxJournalBytes: 67 bytes per chunk (a quoted sha256 and a comma)
	// plus the header fields.
	maxJournalBytes = maxChunksPerFile*67 + 4096
	minChunkSize    = 4 << 10
)

type journal struct {
	Version   int    `json:"version"`
	Blob      string `json:"blob"`
	Size      int64  `json:"size"`
	ChunkSize int64  `json:"chunk_size"`
	// Chunks[i] is the lowercase hex sha256 of chunk i once it has been
	// written in full; "" while it is missing.
	Chunks []string `json:"chunks"`
}

func chunkCount(size, chunkSize int64) int {
	return int((size + chunkSize - 1) / chunkSize)
}

// chunkRange returns chunk i's first and last byte (inclusive).
func chunkRange(i int, size, chunkSize int64) (start, end int64) {
	start = int64(i) * chunkSize
	return start, min(start+chunkSize, size) - 1
}

// parseJournal decodes a journal and accepts it only if it describes the
// same blob, size and chunking as the download about to resume.
func parseJournal(b []byte, blob string, size, chunkSize int64) (*journal, error) {
	if len(b) > maxJournalBytes {
		return nil, fmt.Errorf("journal larger than %d bytes", maxJournalBytes)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("journal is not valid JSON: %w", err)
	}
	switch {
	case j.Version != journalVersion:
		return nil, fmt.Errorf("journal version %d, want %d", j.Version, journalVersion)
	case j.Blob != blob || j.Size != size || j.ChunkSize != chunkSize:
		return nil, fmt.Errorf("journal describes blob %s (%d bytes, %d-byte chunks), want %s (%d, %d)",
			j.Blob, j.Size, j.ChunkSize, blob, size, chunkSize)
	case len(j.Chunks) != chunkCount(size, chunkSize):
		return nil, fmt.Errorf("journal lists %d chunks, want %d", len(j.Chunks), chunkCount(size, chunkSize))
	}
	for i, h := range j.Chunks {
		if h != "" && !sha256Pattern.MatchString(h) {
			return nil, fmt.Errorf("journal chunk %d hash %q is not a sha256", i, h)
		}
	}
	return &j, nil
}

// partial is an open, locked partial download.
type partial struct {
	path, journalPath string
	f                 *os.File

	mu sync.Mutex // guards j and journal writes
	j  journal
}

func partialPaths(blobsDir, blob string) (data, journalPath string) {
	return filepath.Join(blobsDir, blob+partialSuffix), filepath.Join(blobsDir, blob+journalSuffix)
}

// openPartial opens and locks the partial download of blob. An existing one
// is kept only if its journal matches and then only the chunks whose bytes
// still hash to the journaled sha256: a truncated or damaged file costs the
// damaged chunks, never the file. With create=false and nothing on disk it
// returns (nil, nil).
func openPartial(blobsDir, blob string, size, chunkSize int64, create bool) (*partial, error) {
	dataPath, journalPath := partialPaths(blobsDir, blob)
	for range 3 {
		p, err := tryOpenPartial(dataPath, journalPath, blob, size, chunkSize, create)
		if !errors.Is(err, errReplaced) {
			return p, err
		}
	}
	return nil, fmt.Errorf("%s keeps being replaced: is another process downloading into this cache?", dataPath)
}

var errReplaced = errors.New("partial file replaced while locking")

func tryOpenPartial(dataPath, journalPath, blob string, size, chunkSize int64, create bool) (*partial, error) {
	f, created, err := openOrCreate(dataPath, create)
	if err != nil || f == nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", dataPath, err)
	}
	// Between open and lock another process may have finished and renamed
	// this inode into place as the blob: never write to that.
	if same, err := stillAt(f, dataPath); err != nil || !same {
		f.Close()
		if err != nil {
			return nil, err
		}
		return nil, errReplaced
	}
	p := &partial{path: dataPath, journalPath: journalPath, f: f}
	if !created {
		if p.resume(blob, size, chunkSize) {
			return p, nil
		}
	}
	if err := p.reset(blob, size, chunkSize); err != nil {
		p.discard()
		return nil, err
	}
	return p, nil
}

func openOrCreate(path string, create bool) (f *os.File, created bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|oNoFollow, 0)
	if err == nil {
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			return nil, false, fmt.Errorf("%s is not a regular file: remove it", path)
		}
		return f, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("open partial download: %w", err)
	}
	if !create {
		return nil, false, nil
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|oNoFollow, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("create partial download: %w", err)
	}
	return f, true, nil
}

func stillAt(f *os.File, path string) (bool, error) {
	a, err := f.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// resume loads the journal and re-hashes each journaled chunk; it reports
// false when nothing can be trusted. A data file cut short (or grown) is
// brought back to its size first: the chunks the cut reached then fail
// their hash and are fetched again, the others survive.
func (p *partial) resume(blob string, size, chunkSize int64) bool {
	st, err := p.f.Stat()
	if err != nil {
		return false
	}
	if st.Size() != size {
		if err := p.f.Truncate(size); err != nil {
			return false
		}
	}
	b, err := readFileLimited(p.journalPath, maxJournalBytes)
	if err != nil {
		return false
	}
	j, err := parseJournal(b, blob, size, chunkSize)
	if err != nil {
		return false
	}
	changed := false
	for i, want := range j.Chunks {
		if want == "" {
			continue
		}
		start, end := chunkRange(i, size, chunkSize)
		got, err := hashRange(p.f, start, end-start+1)
		if err != nil || got != want {
			j.Chunks[i] = ""
			changed = true
		}
	}
	p.j = *j
	if changed {
		if err := p.writeJournal(); err != nil {
			return false
		}
	}
	return true
}

// reset empties the data file and preallocates it. Truncate to 0 first:
// stale bytes past a chunk that a later run never rewrites must not survive
// (xet-core PR #764).
func (p *partial) reset(blob string, size, chunkSize int64) error {
	if err := p.f.Truncate(0); err != nil {
		return fmt.Errorf("%s: %w", p.path, err)
	}
	if err := p.f.Truncate(size); err != nil {
		return fmt.Errorf("%s: preallocate %d bytes: %w", p.path, size, err)
	}
	p.j = journal{
		Version: journalVersion, Blob: blob, Size: size, ChunkSize: chunkSize,
		Chunks: make([]string, chunkCount(size, chunkSize)),
	}
	return p.writeJournal()
}

func (p *partial) doneBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for i, h := range p.j.Chunks {
		if h != "" {
			start, end := chunkRange(i, p.j.Size, p.j.ChunkSize)
			n += end - start + 1
		}
	}
	return n
}

func (p *partial) missingChunks() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var missing []int
	for i, h := range p.j.Chunks {
		if h == "" {
			missing = append(missing, i)
		}
	}
	return missing
}

// markDone journals chunk i. The chunk's bytes are not fsynced first: a
// resume re-hashes them, so a chunk lost in a crash is simply fetched again.
func (p *partial) markDone(i int, sum string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.j.Chunks[i] = sum
	return p.writeJournal()
}

// writeJournal replaces the journal atomically; callers hold p.mu or own p.
func (p *partial) writeJournal() error {
	b, err := json.Marshal(&p.j)
	if err != nil {
		return err
	}
	return writeFileAtomic(p.journalPath, b)
}

// suspend closes the partial download and keeps it for a later resume.
func (p *partial) suspend() {
	p.f.Close()
}

// discard deletes the partial download.
func (p *partial) discard() {
	p.f.Close()
	os.Remove(p.path)
	os.Remove(p.journalPath)
}

func hashRange(r io.ReaderAt, off, n int64) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, off, n)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func readFileLimited(path string, limit int64) ([]byte, error) {
	return limits.ReadFile(path, limit)
}

// writeFileAtomic writes path via a temporary file and rename, so a reader
// sees the old or the new content, never a torn one.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
