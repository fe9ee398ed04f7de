package download

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

func TestSnapshotDownloadsEveryFileInTheCacheLayout(t *testing.T) {
	h, commit, files := newTestHub(t)
	c := testClient(t, h)
	cache := t.TempDir()
	var rec recorder
	snap, err := snapshot(t, c, cache, &rec)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cache, "models--acme--tiny")
	if want := filepath.Join(root, "snapshots", commit); snap.Dir != want || snap.Commit != commit {
		t.Fatalf("snapshot %s @ %s, want %s @ %s", snap.Dir, snap.Commit, want, commit)
	}
	checkSnapshot(t, snap.Dir, files)
	for _, f := range snap.Files {
		link, err := os.Readlink(filepath.Join(snap.Dir, f.Path))
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", f.Path, err)
		}
		want := strings.Repeat("../", strings.Count(f.Path, "/")) + "../../blobs/" + f.blobName()
		if link != want {
			t.Errorf("%s -> %s, want %s", f.Path, link, want)
		}
	}
	if ref, err := os.ReadFile(filepath.Join(root, "refs", "main")); err != nil || string(ref) != commit {
		t.Errorf("refs/main = %q, %v; want %s", ref, err, commit)
	}
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	if rec.plan.Bytes != total || rec.bytes.Load() != total || len(rec.done) != len(files) {
		t.Errorf("progress: plan %+v, counted %d, %d files done; want %d bytes, %d files",
			rec.plan, rec.bytes.Load(), len(rec.done), total, len(files))
	}
	leftovers, _ := filepath.Glob(filepath.Join(root, "blobs", "*.nvmai.*"))
	if len(leftovers) != 0 {
		t.Errorf("partial files left behind: %v", leftovers)
	}
	for _, r := range h.Requests() {
		if r.Proto != "HTTP/1.1" {
			t.Errorf("%s %s over %s", r.Method, r.Path, r.Proto)
		}
		if r.Server == "cdn" && r.Method == "GET" && !strings.HasPrefix(r.Range, "bytes=") {
			t.Errorf("CDN GET without Range: %+v", r)
		}
	}
}

// Each fault strikes the second chunk of the big shard once; the retry
// must succeed and the file must be exact.
func TestSnapshotSurvivesTransientFaults(t *testing.T) {
	cases := []struct {
		name  string
		fault fakehub.Fault
	}{
		{"503 with Retry-After", fakehub.Fault{Kind: fakehub.Status, Status: 503, RetryAfter: "1"}},
		{"429 with Retry-After far too long", fakehub.Fault{Kind: fakehub.Status, Status: 429, RetryAfter: "3600"}},
		{"200 instead of 206", fakehub.Fault{Kind: fakehub.IgnoreRange}},
		{"wrong Content-Range", fakehub.Fault{Kind: fakehub.WrongContentRange}},
		{"short body", fakehub.Fault{Kind: fakehub.ShortBody}},
		{"long body", fakehub.Fault{Kind: fakehub.LongBody, After: 10}},
		{"unsized short body", fakehub.Fault{Kind: fakehub.UnsizedShort}},
		{"unsized long body", fakehub.Fault{Kind: fakehub.UnsizedLong, After: 10}},
		{"truncated body", fakehub.Fault{Kind: fakehub.Truncate, After: 1000}},
		{"connection reset", fakehub.Fault{Kind: fakehub.Reset, After: 1000}},
		{"stalled body", fakehub.Fault{Kind: fakehub.Stall, After: 100}},
		{"trickling body", fakehub.Fault{Kind: fakehub.Trickle}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _, files := newTestHub(t)
			f := tc.fault
			f.Server, f.File, f.Offset, f.Times = "cdn", bigFile, testChunk, 1
			h.Inject(f)
			c := testClient(t, h)
			c.StallWindow = stallTestWindow
			start := time.Now()
			snap, err := snapshot(t, c, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, snap.Dir, files)
			gets := cdnGets(h.Requests(), bigFile)
			want := fmt.Sprintf("bytes=%d-%d", testChunk, 2*testChunk-1)
			if n := strings.Count(strings.Join(gets, " "), want); n != 2 {
				t.Errorf("chunk 1 requested %d times, want 2 (the fault, then the retry): %v", n, gets)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: Retry-After not capped, or the stall floor is not working", d)
			}
		})
	}
}

// A fault that never clears must fail with a message that says what went
// wrong, and nothing may get its final name.
func TestSnapshotPersistentFaultsFailCleanly(t *testing.T) {
	cases := []struct {
		name  string
		fault fakehub.Fault
		want  string
	}{
		{"503 forever", fakehub.Fault{Kind: fakehub.Status, Status: 503, RetryAfter: "0"}, "503"},
		{"Range never honoured", fakehub.Fault{Kind: fakehub.IgnoreRange}, "ignored the Range header"},
		{"wrong Content-Range", fakehub.Fault{Kind: fakehub.WrongContentRange}, "wrong Content-Range"},
		{"always short", fakehub.Fault{Kind: fakehub.ShortBody}, "Content-Length"},
		{"always unsized short", fakehub.Fault{Kind: fakehub.UnsizedShort}, "short body"},
		{"always stalls", fakehub.Fault{Kind: fakehub.Stall, After: 100}, "stalled"},
		{"always trickles", fakehub.Fault{Kind: fakehub.Trickle}, "stalled"},
		{"always reset", fakehub.Fault{Kind: fakehub.Reset, After: 100}, "giving up after 3 attempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, commit, _ := newTestHub(t)
			f := tc.fault
			f.Server, f.File, f.Offset = "cdn", bigFile, testChunk
			h.Inject(f)
			c := testClient(t, h)
			c.MaxRetries = 2
			c.StallWindow = stallTestWindow
			cache := t.TempDir()
			_, err := snapshot(t, c, cache, nil)
			if err == nil {
				t.Fatal("Snapshot succeeded against a server that never serves chunk 1")
			}
			for _, part := range []string{tc.want, bigFile, "chunk 1"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not mention %q", err, part)
				}
			}
			root := filepath.Join(cache, "models--acme--tiny")
			assertAbsent(t, filepath.Join(root, "snapshots", commit, bigFile))
			assertAbsent(t, filepath.Join(root, "blobs", sha256Hex(testFiles()[bigFile])))
		})
	}
}

func TestSnapshotRefusesWhatTheHubDidNotAdvertise(t *testing.T) {
	wrongSHA := strings.Repeat("ab", 32)
	wrongOID := strings.Repeat("cd", 20)
	cases := []struct {
		name      string
		file      string
		hash      string
		sizeDelta int64
		want      []string
	}{
		{"wrong sha256", bigFile, wrongSHA, 0,
			[]string{bigFile, "sha256 mismatch", wrongSHA, sha256Hex(testFiles()[bigFile])}},
		{"wrong git oid", "config.json", wrongOID, 0,
			[]string{"config.json", "git blob sha1 mismatch", wrongOID, fakehub.GitBlobSHA1(testFiles()["config.json"])}},
		{"LFS file larger than the server's", bigFile, "", 1, []string{bigFile, "the Hub lists"}},
		{"LFS file smaller than the server's", bigFile, "", -1, []string{bigFile, "the Hub lists"}},
		{"git file size lie", "config.json", "", 5, []string{"config.json", "the Hub lists"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, commit, files := newTestHub(t)
			h.Advertise(testRepo, tc.file, tc.hash, int64(len(files[tc.file]))+tc.sizeDelta)
			cache := t.TempDir()
			_, err := snapshot(t, testClient(t, h), cache, nil)
			if err == nil {
				t.Fatal("Snapshot accepted a file that does not match the Hub's metadata")
			}
			for _, part := range tc.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not mention %q", err, part)
				}
			}
			root := filepath.Join(cache, "models--acme--tiny")
			assertAbsent(t, filepath.Join(root, "snapshots", commit, tc.file))
			var ve *VerifyError
			if errors.As(err, &ve) {
				// A verification failure deletes the partial download too.
				left, _ := filepath.Glob(filepath.Join(root, "blobs", "*"))
				for _, l := range left {
					if strings.HasPrefix(filepath.Base(l), tc.hash) {
						t.Errorf("%s left behind", l)
					}
				}
			}
		})
	}
}

// Cancel after three chunks, damage one journaled chunk, resume: only the
// damaged and the missing chunks travel again.
func TestResumeRefetchesOnlyBadAndMissingChunks(t *testing.T) {
	h, c, cache, content := oneBigFileHub(t, 7, 6*testChunk+123)

	ctx, cancel := contextWithTimeout(t)
	rec := &recorder{onBytes: func(total int64) {
		if total >= 3*testChunk {
			cancel()
		}
	}}
	_, err := c.Snapshot(ctx, testRepo, "main", SnapshotOptions{CacheDir: cache, Progress: rec})
	if !errors.Is(err, errContextCanceled) {
		t.Fatalf("cancelled Snapshot returned %v, want context.Canceled", err)
	}
	blobs := filepath.Join(cache, "models--acme--tiny", "blobs")
	dataPath, journalPath := partialPaths(blobs, sha256Hex(content))
	j := readJournal(t, journalPath)
	if done := journaledChunks(j); done != "0,1,2" {
		t.Fatalf("journaled chunks %s, want 0,1,2", done)
	}
	testfix.FlipByte(t, dataPath, testChunk+10, 0xff)

	h.ResetRequests()
	rec = &recorder{}
	snap, err := snapshot(t, c, cache, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap.Dir, map[string][]byte{bigFile: content})
	got := strings.Join(cdnGets(h.Requests(), bigFile), " ")
	want := strings.Join([]string{
		rangeOf(1, len(content)), rangeOf(3, len(content)), rangeOf(4, len(content)), rangeOf(5, len(content)),
		rangeOf(6, len(content)),
	}, " ")
	if got != want {
		t.Errorf("resume fetched\n  %s\nwant\n  %s", got, want)
	}
	if rec.plan.ResumedBytes != 2*testChunk {
		t.Errorf("plan says %d bytes resumed, want %d (chunks 0 and 2)", rec.plan.ResumedBytes, 2*testChunk)
	}
	assertAbsent(t, dataPath)
	assertAbsent(t, journalPath)
}

// A partial file cut short keeps the chunks before the cut.
func TestResumeAfterTheTempFileWasTruncated(t *testing.T) {
	h, c, cache, content := oneBigFileHub(t, 8, 5*testChunk)
	ctx, cancel := contextWithTimeout(t)
	rec := &recorder{onBytes: func(total int64) {
		if total >= 4*testChunk {
			cancel()
		}
	}}
	if _, err := c.Snapshot(ctx, testRepo, "main", SnapshotOptions{CacheDir: cache, Progress: rec}); err == nil {
		t.Fatal("cancelled Snapshot succeeded")
	}
	dataPath, _ := partialPaths(filepath.Join(cache, "models--acme--tiny", "blobs"), sha256Hex(content))
	if err := os.Truncate(dataPath, 2*testChunk+testChunk/2); err != nil {
		t.Fatal(err)
	}
	h.ResetRequests()
	snap, err := snapshot(t, c, cache, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap.Dir, map[string][]byte{bigFile: content})
	got := strings.Join(cdnGets(h.Requests(), bigFile), " ")
	want := strings.Join([]string{rangeOf(2, len(content)), rangeOf(3, len(content)), rangeOf(4, len(content))}, " ")
	if got != want {
		t.Errorf("after truncation fetched %s, want %s", got, want)
	}
}

func TestSecondSnapshotMakesNoDataRequests(t *testing.T) {
	h, c, cache, commit, files := downloadedHub(t)
	h.ResetRequests()
	rec := &recorder{}
	snap, err := snapshot(t, c, cache, rec)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap.Dir, files)
	if data := dataRequests(h.Requests()); len(data) != 0 {
		t.Errorf("second Snapshot made %d data requests: %+v", len(data), data)
	}
	if rec.plan.ReusedFiles != len(files) || rec.plan.Files != 0 {
		t.Errorf("plan %+v, want all %d files reused", rec.plan, len(files))
	}

	// A snapshot link lost, its blob intact: relinked, still no data request.
	os.Remove(filepath.Join(snap.Dir, "config.json"))
	h.ResetRequests()
	if _, err := snapshot(t, c, cache, nil); err != nil {
		t.Fatal(err)
	}
	if data := dataRequests(h.Requests()); len(data) != 0 {
		t.Errorf("relinking made data requests: %+v", data)
	}
	checkSnapshot(t, snap.Dir, files)

	// A blob damaged in the cache: detected and downloaded again.
	blob := filepath.Join(cache, "models--acme--tiny", "blobs", sha256Hex(files[bigFile]))
	testfix.FlipByte(t, blob, 5, 0xff)
	h.ResetRequests()
	if _, err := snapshot(t, c, cache, nil); err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, filepath.Join(cache, "models--acme--tiny", "snapshots", commit), files)
	if n := len(cdnGets(h.Requests(), bigFile)); n != 6 {
		t.Errorf("damaged blob: %d chunk requests, want 6", n)
	}
}

func TestSnapshotChecksDiskSpaceFirst(t *testing.T) {
	h, commit, files := newTestHub(t)
	c := testClient(t, h)
	var total uint64
	for _, b := range files {
		total += uint64(len(b))
	}
	const reserve = 1 << 30
	var asked string
	c.FreeSpace = func(path string) (uint64, error) {
		asked = path
		return total + reserve - 1, nil
	}
	cache := t.TempDir()
	_, err := c.Snapshot(t.Context(), testRepo, "main",
		SnapshotOptions{CacheDir: cache, ReserveBytes: reserve})
	var dse *DiskSpaceError
	if !errors.As(err, &dse) {
		t.Fatalf("got %v, want a DiskSpaceError", err)
	}
	if dse.Need != total+reserve || dse.Free != total+reserve-1 || asked != cache {
		t.Errorf("need %d free %d on %s; want need %d free %d on %s",
			dse.Need, dse.Free, asked, total+reserve, total+reserve-1, cache)
	}
	for _, part := range []string{"not enough disk space", cache, "need", "free"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
	if data := dataRequests(h.Requests()); len(data) != 0 {
		t.Errorf("the preflight let %d data requests through", len(data))
	}
	assertAbsent(t, filepath.Join(cache, "models--acme--tiny", "snapshots", commit))
}

// The real fixture checkpoint, end to end through the fake Hub.
func TestSnapshotOfTinyMoEFixture(t *testing.T) {
	dir := fixtureDir(t, "dev/tiny-moe-fused")
	h := fakehub.New(t, fakehub.Options{TreePageSize: 4})
	h.AddRepoDir(t, "nvmai/tiny-moe-fused", dir, fakehub.RepoOptions{})
	c := testClient(t, h)
	c.ChunkSize = 256 << 10
	snap, err := c.Snapshot(t.Context(), "nvmai/tiny-moe-fused", "main", SnapshotOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Files) != len(entries) {
		t.Errorf("snapshot has %d files, the fixture %d", len(snap.Files), len(entries))
	}
	want := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want[e.Name()] = b
	}
	checkSnapshot(t, snap.Dir, want)
}

func TestSnapshotIncludeFilter(t *testing.T) {
	h, _, files := newTestHub(t)
	snap, err := testClient(t, h).Snapshot(t.Context(), testRepo, "main", SnapshotOptions{
		CacheDir: t.TempDir(),
		Include:  func(p string) bool { return strings.HasSuffix(p, ".json") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Files) != 3 {
		t.Errorf("got %d files, want the 3 .json files", len(snap.Files))
	}
	checkSnapshot(t, snap.Dir, map[string][]byte{"config.json": files["config.json"]})
	assertAbsent(t, filepath.Join(snap.Dir, bigFile))
}

func TestExpiredCDNURLIsRefreshed(t *testing.T) {
	h, _, files := newTestHub(t)
	h.Inject(fakehub.Fault{Server: "cdn", File: bigFile, Offset: 2 * testChunk, Times: 1,
		Kind: fakehub.Status, Status: 403})
	snap, err := snapshot(t, testClient(t, h), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap.Dir, files)
	heads := 0
	for _, r := range h.Requests() {
		if r.Method == "HEAD" && r.File == bigFile {
			heads++
		}
	}
	if heads != 2 {
		t.Errorf("%d HEADs of %s, want 2 (initial, and the refresh after the 403)", heads, bigFile)
	}
}
