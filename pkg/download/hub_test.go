package download

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/pkg/download/fakehub"
)

func TestHubErrorsSayWhatToDo(t *testing.T) {
	h := fakehub.New(t, fakehub.Options{})
	h.AddToken("hf_granted")
	h.AddToken("hf_other")
	files := map[string][]byte{"config.json": []byte("{}")}
	h.AddRepo("acme/private", files, fakehub.RepoOptions{Access: fakehub.Private, Granted: []string{"hf_granted"}})
	h.AddRepo("acme/gated", files, fakehub.RepoOptions{Access: fakehub.Gated, Granted: []string{"hf_granted"}})
	h.AddRepo("acme/public", files, fakehub.RepoOptions{})
	cases := []struct {
		name, repo, rev, token string
		sentinel               error
		status                 int
		want                   []string
	}{
		{"private without token", "acme/private", "main", "", ErrUnauthorized, 401,
			[]string{"acme/private", "HF_TOKEN", "private, gated or does not exist"}},
		{"private, token not granted", "acme/private", "main", "hf_other", ErrNotFound, 404,
			[]string{"acme/private", "check the repository name"}},
		{"gated without token", "acme/gated", "main", "", ErrGated, 401,
			[]string{"accept its licence", h.URL + "/acme/gated", "HF_TOKEN"}},
		{"gated, licence not accepted", "acme/gated", "main", "hf_other", ErrGated, 403,
			[]string{"not been granted access", h.URL + "/acme/gated"}},
		{"invalid token", "acme/public", "main", "hf_wrong", ErrUnauthorized, 401,
			[]string{"rejected the token", "/settings/tokens"}},
		{"missing repo", "acme/nothing", "main", "hf_other", ErrNotFound, 404,
			[]string{"acme/nothing", "check the repository name"}},
		{"missing revision", "acme/public", "v9", "", ErrNotFound, 404,
			[]string{`revision "v9" does not exist`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testClient(t, h)
			c.Token = tc.token
			_, err := c.ResolveRevision(t.Context(), tc.repo, tc.rev)
			var he *HubError
			if !errors.As(err, &he) || !errors.Is(err, tc.sentinel) || he.Status != tc.status {
				t.Fatalf("got %v, want a %d HubError matching %v", err, tc.status, tc.sentinel)
			}
			for _, part := range tc.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not mention %q", err, part)
				}
			}
		})
	}
	t.Run("granted token works", func(t *testing.T) {
		c := testClient(t, h)
		c.Token = "hf_granted"
		for _, repo := range []string{"acme/private", "acme/gated"} {
			if _, err := c.Snapshot(t.Context(), repo, "main", SnapshotOptions{CacheDir: t.TempDir()}); err != nil {
				t.Errorf("%s: %v", repo, err)
			}
		}
	})
}

func TestResolveRevisionPinsACommit(t *testing.T) {
	h, commit, _ := newTestHub(t)
	c := testClient(t, h)
	for _, rev := range []string{"main", commit} {
		got, err := c.ResolveRevision(t.Context(), testRepo, rev)
		if err != nil || got != commit {
			t.Errorf("ResolveRevision(%s) = %s, %v; want %s", rev, got, err, commit)
		}
	}
	// Everything after resolution names the commit, never the branch.
	if _, err := snapshot(t, c, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range h.Requests() {
		if strings.Contains(r.Path, "/resolve/") && !strings.Contains(r.Path, "/resolve/"+commit+"/") {
			t.Errorf("%s %s does not pin the commit", r.Method, r.Path)
		}
		if strings.Contains(r.Path, "/tree/") && !strings.Contains(r.Path, "/tree/"+commit) {
			t.Errorf("%s %s does not pin the commit", r.Method, r.Path)
		}
	}
}

func TestResolveRevisionRefusesBadNames(t *testing.T) {
	c := &Client{Endpoint: "https://huggingface.co"}
	for _, tc := range []struct{ repo, rev string }{
		{"../etc", "main"}, {"a/b/c", "main"}, {"a/..", "main"}, {"", "main"},
		{"a/b", ""}, {"a/b", "../../x"}, {"a/b", "/abs"}, {"a/b", `a\b`},
	} {
		if _, err := c.ResolveRevision(t.Context(), tc.repo, tc.rev); err == nil {
			t.Errorf("ResolveRevision(%q, %q) accepted", tc.repo, tc.rev)
		}
	}
}

func TestListFilesFollowsPagination(t *testing.T) {
	h := fakehub.New(t, fakehub.Options{TreePageSize: 2})
	files := testFiles()
	commit := h.AddRepo(testRepo, files, fakehub.RepoOptions{})
	got, err := testClient(t, h).ListFiles(t.Context(), testRepo, commit)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range got {
		paths = append(paths, f.Path)
		want := files[f.Path]
		if f.Size != int64(len(want)) {
			t.Errorf("%s: size %d, want %d", f.Path, f.Size, len(want))
		}
		if f.IsLFS() != (len(want) >= 16<<10) {
			t.Errorf("%s: LFS = %v", f.Path, f.IsLFS())
		}
		if f.IsLFS() && (f.SHA256 != sha256Hex(want) || f.GitOID != "") {
			t.Errorf("%s: sha256 %s oid %q", f.Path, f.SHA256, f.GitOID)
		}
		if !f.IsLFS() && f.GitOID != fakehub.GitBlobSHA1(want) {
			t.Errorf("%s: git oid %s", f.Path, f.GitOID)
		}
	}
	pages := 0
	for _, r := range h.Requests() {
		if strings.Contains(r.Path, "/tree/") {
			pages++
		}
	}
	if len(paths) != len(files) || pages < 3 {
		t.Errorf("listed %v over %d pages, want %d files over several pages", paths, pages, len(files))
	}
}

func TestTreeEntriesAreValidated(t *testing.T) {
	sha := strings.Repeat("a", 64)
	oid := strings.Repeat("b", 40)
	lfs := func(oid string, size int64) *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} {
		return &struct {
			OID  string `json:"oid"`
			Size int64  `json:"size"`
		}{oid, size}
	}
	cases := []struct {
		name string
		e    treeEntry
		ok   bool
	}{
		{"git file", treeEntry{Type: "file", Path: "config.json", Size: 3, OID: oid}, true},
		{"lfs file", treeEntry{Type: "file", Path: "a/b.safetensors", Size: 9, OID: oid, LFS: lfs(sha, 9)}, true},
		{"parent escape", treeEntry{Type: "file", Path: "../x", Size: 3, OID: oid}, false},
		{"inner escape", treeEntry{Type: "file", Path: "a/../../x", Size: 3, OID: oid}, false},
		{"absolute", treeEntry{Type: "file", Path: "/etc/passwd", Size: 3, OID: oid}, false},
		{"backslash", treeEntry{Type: "file", Path: `a\..\x`, Size: 3, OID: oid}, false},
		{"dot", treeEntry{Type: "file", Path: ".", Size: 3, OID: oid}, false},
		{"empty", treeEntry{Type: "file", Path: "", Size: 3, OID: oid}, false},
		{"double slash", treeEntry{Type: "file", Path: "a//b", Size: 3, OID: oid}, false},
		{"negative size", treeEntry{Type: "file", Path: "x", Size: -1, OID: oid}, false},
		{"bad oid", treeEntry{Type: "file", Path: "x", Size: 1, OID: "zz"}, false},
		{"bad sha256", treeEntry{Type: "file", Path: "x", Size: 1, LFS: lfs("abc", 1)}, false},
		{"sizes disagree", treeEntry{Type: "file", Path: "x", Size: 1, LFS: lfs(sha, 2)}, false},
	}
	for _, tc := range cases {
		_, ok, err := fileFromTreeEntry(tc.e)
		if ok != tc.ok || (err == nil) != tc.ok {
			t.Errorf("%s: ok=%v err=%v, want ok=%v", tc.name, ok, err, tc.ok)
		}
	}
	if _, ok, err := fileFromTreeEntry(treeEntry{Type: "directory", Path: "../x"}); ok || err != nil {
		t.Errorf("a directory entry gave ok=%v err=%v, want it skipped", ok, err)
	}
}

func TestParseNextLink(t *testing.T) {
	cases := map[string]string{
		``: ``,
		`<https://huggingface.co/api/models/a/b/tree/c?cursor=x>; rel="next"`: `https://huggingface.co/api/models/a/b/tree/c?cursor=x`,
		`<https://x/prev>; rel="prev", <https://x/next>; rel=next`:            `https://x/next`,
		`<https://x/last>; rel="last"`:                                        ``,
		`https://x/next; rel="next"`:                                          ``,
	}
	for header, want := range cases {
		if got := parseNextLink(header); got != want {
			t.Errorf("parseNextLink(%q) = %q, want %q", header, got, want)
		}
	}
}

func TestNextPageMustStayOnTheHub(t *testing.T) {
	c := &Client{Endpoint: "https://huggingface.co"}
	if _, err := c.nextPage(`<https://evil.example/api?cursor=1>; rel="next"`); err == nil {
		t.Error("a next page on another host was accepted (it would receive the token)")
	}
	got, err := c.nextPage(`</api/models/a/b/tree/c?cursor=1>; rel="next"`)
	if err != nil || got != "https://huggingface.co/api/models/a/b/tree/c?cursor=1" {
		t.Errorf("relative next page: %q, %v", got, err)
	}
}

func TestChunkResponsesAreCheckedBeforeAnyWrite(t *testing.T) {
	c := &Client{Endpoint: "https://huggingface.co"}
	cdn, _ := http.NewRequest(http.MethodGet, "https://cdn.example/x", nil)
	middle := chunk{path: "x", index: 1, start: 100, end: 199, total: 1000}
	whole := chunk{path: "x", index: 0, start: 0, end: 999, total: 1000}
	resp := func(status int, contentRange string, length int64) *http.Response {
		h := http.Header{}
		if contentRange != "" {
			h.Set("Content-Range", contentRange)
		}
		return &http.Response{StatusCode: status, Header: h, ContentLength: length, Request: cdn,
			Body: http.NoBody}
	}
	cases := []struct {
		name      string
		resp      *http.Response
		ch        chunk
		ok, retry bool
	}{
		{"exact 206", resp(206, "bytes 100-199/1000", 100), middle, true, false},
		{"206 without Content-Length", resp(206, "bytes 100-199/1000", -1), middle, true, false},
		{"200 to a middle chunk", resp(200, "", 1000), middle, false, true},
		{"200 for the whole file", resp(200, "", 1000), whole, true, false},
		{"200 for the whole file, wrong length", resp(200, "", 999), whole, false, true},
		{"Content-Range shifted", resp(206, "bytes 101-200/1000", 100), middle, false, true},
		{"Content-Range missing", resp(206, "", 100), middle, false, true},
		{"Content-Range with spaces", resp(206, "bytes  100-199/1000", 100), middle, false, true},
		{"Content-Range total differs", resp(206, "bytes 100-199/1001", 100), middle, false, false},
		{"Content-Length too long", resp(206, "bytes 100-199/1000", 101), middle, false, true},
		{"CDN 403: URL expired", resp(403, "", 0), middle, false, true},
		{"416", resp(416, "bytes */900", 0), middle, false, false},
		{"404", resp(404, "", 0), middle, false, false},
	}
	for _, tc := range cases {
		err := c.checkChunkResponse(tc.resp, tc.ch)
		var ae *attemptError
		if (err == nil) != tc.ok || (err != nil && (!errors.As(err, &ae) || ae.retry != tc.retry)) {
			t.Errorf("%s: %v, want ok=%v retry=%v", tc.name, err, tc.ok, tc.retry)
		}
	}
}

func TestHubHeadersMustAgreeWithTheTree(t *testing.T) {
	f := RemoteFile{Path: "x.safetensors", Size: 10, SHA256: strings.Repeat("a", 64)}
	commit := strings.Repeat("c", 40)
	hdr := func(kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{Header: h}
	}
	cases := []struct {
		name string
		resp *http.Response
		ok   bool
	}{
		{"agree", hdr("X-Repo-Commit", commit, "X-Linked-Etag", `"`+f.SHA256+`"`, "X-Linked-Size", "10"), true},
		{"weak etag", hdr("X-Linked-Etag", `W/"`+strings.ToUpper(f.SHA256)+`"`), true},
		{"other commit", hdr("X-Repo-Commit", strings.Repeat("d", 40)), false},
		{"other sha256", hdr("X-Linked-Etag", `"`+strings.Repeat("b", 64)+`"`), false},
		{"other size", hdr("X-Linked-Size", "11"), false},
		{"garbage size", hdr("X-Linked-Size", "ten"), false},
	}
	for _, tc := range cases {
		if err := checkFileHeaders(tc.resp, commit, f); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
