package download

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Fuzz targets for every parser of untrusted input. Seed corpora live in
// testdata/fuzz/<Name>/; run one with e.g.
// go test -run=^$ -fuzz=FuzzTreeListing -fuzztime=20s ./pkg/download

func FuzzTreeListing(f *testing.F) {
	f.Add([]byte(`[{"type":"file","path":"config.json","size":3,"oid":"` + strings.Repeat("b", 40) + `"}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var entries []treeEntry
		if json.Unmarshal(data, &entries) != nil {
			return
		}
		for _, e := range entries {
			file, ok, err := fileFromTreeEntry(e)
			if !ok {
				continue
			}
			if err != nil {
				t.Fatalf("ok with error %v", err)
			}
			if !filepath.IsLocal(file.Path) || strings.Contains("/"+file.Path+"/", "/../") || file.Path == "." {
				t.Fatalf("accepted unsafe path %q", file.Path)
			}
			if file.Size < 0 || file.Size > maxFileSize {
				t.Fatalf("accepted size %d", file.Size)
			}
			if len(file.blobName()) != 40 && len(file.blobName()) != 64 {
				t.Fatalf("accepted blob name %q", file.blobName())
			}
		}
	})
}

func FuzzParseJournal(f *testing.F) {
	const blob, size, chunk = "aa", 10_000, 4096
	f.Add([]byte(`{"version":1,"blob":"aa","size":10000,"chunk_size":4096,"chunks":["","",""]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := parseJournal(data, blob, size, chunk)
		if err != nil {
			return
		}
		if len(j.Chunks) != chunkCount(size, chunk) {
			t.Fatalf("accepted %d chunks", len(j.Chunks))
		}
		for _, h := range j.Chunks {
			if h != "" && !sha256Pattern.MatchString(h) {
				t.Fatalf("accepted chunk hash %q", h)
			}
		}
		again, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseJournal(again, blob, size, chunk); err != nil {
			t.Fatalf("re-encoded journal refused: %v", err)
		}
	})
}

func FuzzParseNextLink(f *testing.F) {
	f.Add(`<https://huggingface.co/api/models/a/b/tree/c?cursor=x>; rel="next"`)
	f.Fuzz(func(t *testing.T, header string) {
		if got := parseNextLink(header); got != "" && !strings.Contains(header, "<"+got+">") {
			t.Fatalf("parseNextLink(%q) = %q, not a <target> of the header", header, got)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	f.Add("120")
	f.Add("Wed, 21 Oct 2015 07:28:00 GMT")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := parseRetryAfter(v, now)
		if ok && d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v", v, d)
		}
	})
}

func FuzzContentRange(f *testing.F) {
	f.Add("bytes 100-199/1000")
	ch := chunk{path: "x", index: 1, start: 100, end: 199, total: 1000}
	f.Fuzz(func(t *testing.T, header string) {
		if checkContentRange(header, ch) == nil && header != fmt.Sprintf("bytes %d-%d/%d", ch.start, ch.end, ch.total) {
			t.Fatalf("accepted Content-Range %q for %v", header, ch)
		}
	})
}
