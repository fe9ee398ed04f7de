// Package fakehub is a loopback imitation of the Hugging Face Hub for tests:
// the model info, tree and resolve endpoints on one httptest server, and a
// second server standing in for the CDN that LFS files redirect to. Every
// request can be answered with an injected fault (a truncated, stalled,
// trickling or reset body, a 200 to a Range request, a wrong Content-Range,
// 429/503 with Retry-After, ...), and every request is logged so tests can
// assert what was and was not fetched.
//
// It is test code: nothing outside _test.go files should import it.
package fakehub

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Access is who may read a repository.
type Access int

const (
	Public  Access = iota
	Private        // 401 RepoNotFound unless the token is granted
	Gated          // 401 GatedRepo without a token, 403 GatedRepo if not granted
)

// RepoOptions configures AddRepo.
type RepoOptions struct {
	Branch  string // default "main"
	Access  Access
	Granted []string // tokens allowed into a Private or Gated repository
}

// Options configures New.
type Options struct {
	// TLS serves both servers over TLS, offering both h2 and http/1.1 in
	// ALPN (a client that can speak HTTP/2 would get it). Use CertPool.
	TLS bool
	// LFSThreshold: files of at least this many bytes are LFS files
	// (tree lfs.oid, 302 to the CDN). Default 16 KiB.
	LFSThreshold int64
	// TreePageSize > 0 paginates the tree listing with Link: rel="next".
	TreePageSize int
}

// Request is one logged request.
type Request struct {
	Server        string // "hub" or "cdn"
	Method        string
	Path          string // URL path as received
	File          string // repository path for resolve and CDN requests
	Range         string
	Authorization string
	Proto         string
	Status        int
}

// Hub is a running fake Hub. Create it with New; it stops when the test ends.
type Hub struct {
	URL    string // the endpoint (HF_ENDPOINT)
	CDNURL string

	opts     Options
	hub, cdn *httptest.Server
	closing  chan struct{}

	mu         sync.Mutex
	repos      map[string]*repo
	tokens     map[string]bool
	faults     []*injection
	log        []Request
	forbidden  testing.TB // set by ForbidRequests: any request fails this test
	signatures int        // bumping it expires every CDN URL handed out before
}

type repo struct {
	name, commit, branch string
	access               Access
	granted              map[string]bool
	files                map[string]*file
	order                []string
}

type file struct {
	path           string
	data           []byte
	lfs            bool
	sha256, gitOID string
	pointerOID     string
	// what the Hub advertises; differs from the truth to simulate lies
	advSHA256, advGitOID string
	advSize              int64
}

// New starts a fake Hub and its CDN on loopback.
func New(t testing.TB, opts Options) *Hub {
	t.Helper()
	if opts.LFSThreshold == 0 {
		opts.LFSThreshold = 16 << 10
	}
	h := &Hub{
		opts:    opts,
		closing: make(chan struct{}),
		repos:   map[string]*repo{},
		tokens:  map[string]bool{},
	}
	h.hub = newServer(opts.TLS, http.HandlerFunc(h.serveHub))
	h.cdn = newServer(opts.TLS, http.HandlerFunc(h.serveCDN))
	h.URL, h.CDNURL = h.hub.URL, h.cdn.URL
	t.Cleanup(func() {
		close(h.closing) // release handlers parked in a stall
		h.hub.Close()
		h.cdn.Close()
	})
	return h
}

func newServer(useTLS bool, handler http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(handler)
	if !useTLS {
		s.Start()
		return s
	}
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	s.StartTLS()
	return s
}

// CertPool trusts the TLS servers' certificate (Options.TLS).
func (h *Hub) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(h.hub.Certificate())
	pool.AddCert(h.cdn.Certificate())
	return pool
}

// AddToken makes tok a valid token; any other bearer token gets the Hub's
// 401 "Invalid credentials in Authorization header".
func (h *Hub) AddToken(tok string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tokens[tok] = true
}

// AddRepo serves files (path → content) as repository name ("org/name") and
// returns its commit.
func (h *Hub) AddRepo(name string, files map[string][]byte, opts RepoOptions) string {
	if opts.Branch == "" {
		opts.Branch = "main"
	}
	r := &repo{name: name, branch: opts.Branch, access: opts.Access, granted: map[string]bool{},
		files: map[string]*file{}}
	for _, tok := range opts.Granted {
		r.granted[tok] = true
	}
	commit := sha1.New()
	fmt.Fprintf(commit, "repo %s\n", name)
	for _, p := range slices.Sorted(mapsKeys(files)) {
		f := newFile(p, files[p], h.opts.LFSThreshold)
		r.files[p] = f
		r.order = append(r.order, p)
		fmt.Fprintf(commit, "%s %s %s\n", p, f.gitOID, f.sha256)
	}
	r.commit = hex.EncodeToString(commit.Sum(nil))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repos[name] = r
	return r.commit
}

func mapsKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func newFile(p string, data []byte, lfsThreshold int64) *file {
	sum := sha256.Sum256(data)
	f := &file{path: p, data: data, lfs: int64(len(data)) >= lfsThreshold,
		sha256: hex.EncodeToString(sum[:]), gitOID: GitBlobSHA1(data), advSize: int64(len(data))}
	f.advGitOID = f.gitOID
	if f.lfs {
		f.pointerOID = GitBlobSHA1([]byte(lfsPointer(f.sha256, len(data))))
		f.advSHA256 = f.sha256
	}
	return f
}

func lfsPointer(sha string, size int) string {
	return fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha, size)
}

// GitBlobSHA1 is git's object id of a blob: sha1("blob <size>\0" + data).
func GitBlobSHA1(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// AddRepoDir serves every regular file under dir as repository name.
func (h *Hub) AddRepoDir(t testing.TB, name, dir string, opts RepoOptions) string {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatalf("fakehub: read %s: %v", dir, err)
	}
	return h.AddRepo(name, files, opts)
}

// Advertise makes the Hub lie about a file: the tree and resolve headers
// report hash ("" keeps the truth; a sha256 for LFS files, a git blob sha1
// for the others) and size (< 0 keeps it).
func (h *Hub) Advertise(repoName, path, hash string, size int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.repos[repoName].files[path]
	switch {
	case hash != "" && f.lfs:
		f.advSHA256 = hash
	case hash != "":
		f.advGitOID = hash
	}
	if size >= 0 {
		f.advSize = size
	}
}

// ExpireCDNURLs makes every CDN URL handed out so far answer 403, as a
// signed URL past its expiry does.
func (h *Hub) ExpireCDNURLs() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.signatures++
}

// Requests returns the log so far.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

// ResetRequests clears the log.
func (h *Hub) ResetRequests() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = nil
}

func (h *Hub) record(r *http.Request, server, filePath string, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, Request{
		Server: server, Method: r.Method, Path: r.URL.Path, File: filePath, Range: r.Header.Get("Range"),
		Authorization: r.Header.Get("Authorization"), Proto: r.Proto, Status: status,
	})
}

// ForbidRequests makes every later request to the Hub or its CDN fail t
// (and answer 418): what an offline client must never make.
func (h *Hub) ForbidRequests(t testing.TB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forbidden = t
}

// refuseForbidden answers and fails the test when requests are forbidden.
func (h *Hub) refuseForbidden(w http.ResponseWriter, r *http.Request, server string) bool {
	h.mu.Lock()
	t := h.forbidden
	h.mu.Unlock()
	if t == nil {
		return false
	}
	t.Errorf("fakehub: %s request %s %s while requests are forbidden", server, r.Method, r.URL)
	http.Error(w, "requests are forbidden in this test", http.StatusTeapot)
	return true
}

// ---- Hub endpoints ----

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	if h.refuseForbidden(w, r, "hub") {
		return
	}
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		h.serveAPI(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/api/resolve-cache/models/"):
		h.serveResolveCache(w, r, strings.TrimPrefix(p, "/api/resolve-cache/models/"))
	case strings.Contains(p, "/resolve/"):
		h.serveResolve(w, r, p)
	default:
		h.fail(w, r, "hub", "", http.StatusNotFound, "", "no such endpoint")
	}
}

// splitRepo splits "org/name/rest" into the repo id and the rest.
func splitRepo(p string) (repoID, rest string, ok bool) {
	parts := strings.SplitN(p, "/", 3)
	if len(parts) < 3 {
		return "", "", false
	}
	return parts[0] + "/" + parts[1], parts[2], true
}

func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request, p string) {
	repoID, rest, ok := splitRepo(p)
	if !ok {
		h.fail(w, r, "hub", "", http.StatusNotFound, "", "no such endpoint")
		return
	}
	kind, rev, _ := strings.Cut(rest, "/")
	rev, err := url.PathUnescape(rev)
	if err != nil {
		h.fail(w, r, "hub", "", http.StatusBadRequest, "", "bad revision")
		return
	}
	rp, ok := h.authorize(w, r, repoID, "")
	if !ok {
		return
	}
	if !rp.knows(rev) {
		h.fail(w, r, "hub", "", http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	if h.injectedStatus(w, r, "hub", "") {
		return
	}
	switch kind {
	case "revision":
		h.serveInfo(w, r, rp)
	case "tree":
		h.serveTree(w, r, rp)
	default:
		h.fail(w, r, "hub", "", http.StatusNotFound, "", "no such endpoint")
	}
}

func (rp *repo) knows(rev string) bool { return rev == rp.branch || rev == rp.commit }

func (h *Hub) serveInfo(w http.ResponseWriter, r *http.Request, rp *repo) {
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	info := struct {
		ID       string    `json:"id"`
		SHA      string    `json:"sha"`
		Private  bool      `json:"private"`
		Gated    any       `json:"gated"`
		Siblings []sibling `json:"siblings"`
	}{ID: rp.name, SHA: rp.commit, Private: rp.access == Private, Gated: false}
	if rp.access == Gated {
		info.Gated = "manual"
	}
	for _, p := range rp.order {
		info.Siblings = append(info.Siblings, sibling{p})
	}
	h.writeJSON(w, r, info)
}

type treeEntry struct {
	Type string    `json:"type"`
	Path string    `json:"path"`
	Size int64     `json:"size"`
	OID  string    `json:"oid"`
	LFS  *lfsEntry `json:"lfs,omitempty"`
}

type lfsEntry struct {
	OID         string `json:"oid"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

func (h *Hub) serveTree(w http.ResponseWriter, r *http.Request, rp *repo) {
	var entries []treeEntry
	dirs := map[string]bool{}
	h.mu.Lock()
	for _, p := range rp.order {
		for d := filepath.ToSlash(filepath.Dir(p)); d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, treeEntry{Type: "directory", Path: d, OID: GitBlobSHA1([]byte(d))})
			}
		}
		f := rp.files[p]
		e := treeEntry{Type: "file", Path: p, Size: f.advSize, OID: f.advGitOID}
		if f.lfs {
			e.OID = f.pointerOID
			e.LFS = &lfsEntry{OID: f.advSHA256, Size: f.advSize,
				PointerSize: len(lfsPointer(f.sha256, len(f.data)))}
		}
		entries = append(entries, e)
	}
	h.mu.Unlock()
	if size := h.opts.TreePageSize; size > 0 {
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		from = min(max(from, 0), len(entries))
		to := min(from+size, len(entries))
		if to < len(entries) {
			q := r.URL.Query()
			q.Set("cursor", strconv.Itoa(to))
			next := *r.URL
			next.RawQuery = q.Encode()
			w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, h.URL, next.RequestURI()))
		}
		entries = entries[from:to]
	}
	if entries == nil {
		entries = []treeEntry{}
	}
	h.writeJSON(w, r, entries)
}

func (h *Hub) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	h.record(r, "hub", "", http.StatusOK)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// serveResolve answers /{org}/{name}/resolve/{rev}/{path}: LFS files with a
// 302 to the CDN, git files with a relative 307 to resolve-cache, both
// carrying the headers huggingface_hub reads.
func (h *Hub) serveResolve(w http.ResponseWriter, r *http.Request, p string) {
	before, after, _ := strings.Cut(p, "/resolve/")
	repoID := strings.TrimPrefix(before, "/")
	rev, escapedPath, _ := strings.Cut(after, "/")
	rev, _ = url.PathUnescape(rev)
	filePath, err := url.PathUnescape(escapedPath)
	if err != nil {
		h.fail(w, r, "hub", "", http.StatusBadRequest, "", "bad path")
		return
	}
	rp, ok := h.authorize(w, r, repoID, filePath)
	if !ok {
		return
	}
	if !rp.knows(rev) {
		h.fail(w, r, "hub", filePath, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	h.mu.Lock()
	f := rp.files[filePath]
	sig := h.signatures
	h.mu.Unlock()
	if f == nil {
		w.Header().Set("X-Repo-Commit", rp.commit)
		h.fail(w, r, "hub", filePath, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	if h.injectedStatus(w, r, "hub", filePath) {
		return
	}
	hdr := w.Header()
	hdr.Set("X-Repo-Commit", rp.commit)
	if f.lfs {
		hdr.Set("X-Linked-Etag", `"`+f.advSHA256+`"`)
		hdr.Set("X-Linked-Size", strconv.FormatInt(f.advSize, 10))
		hdr.Set("ETag", `"`+f.pointerOID+`"`)
		hdr.Set("Location", fmt.Sprintf("%s/lfs/%s/%s/%s?Expires=%d&Signature=%d",
			h.CDNURL, repoID, rp.commit, escapedPath, 1<<40, sig))
		h.record(r, "hub", filePath, http.StatusFound)
		w.WriteHeader(http.StatusFound)
		return
	}
	hdr.Set("ETag", `"`+f.advGitOID+`"`)
	hdr.Set("Location", fmt.Sprintf("/api/resolve-cache/models/%s/%s/%s", repoID, rp.commit, escapedPath))
	h.record(r, "hub", filePath, http.StatusTemporaryRedirect)
	w.WriteHeader(http.StatusTemporaryRedirect)
}

func (h *Hub) serveResolveCache(w http.ResponseWriter, r *http.Request, p string) {
	repoID, rest, ok := splitRepo(p)
	commit, escapedPath, _ := strings.Cut(rest, "/")
	filePath, err := url.PathUnescape(escapedPath)
	if !ok || err != nil {
		h.fail(w, r, "hub", "", http.StatusNotFound, "", "no such endpoint")
		return
	}
	rp, ok := h.authorize(w, r, repoID, filePath)
	if !ok {
		return
	}
	h.mu.Lock()
	f := rp.files[filePath]
	h.mu.Unlock()
	if f == nil || commit != rp.commit {
		h.fail(w, r, "hub", filePath, http.StatusNotFound, "EntryNotFound", "Entry not found")
		return
	}
	w.Header().Set("X-Repo-Commit", rp.commit)
	w.Header().Set("ETag", `"`+f.gitOID+`"`)
	h.serveBytes(w, r, "hub", f)
}

// authorize applies the Hub's access rules and writes the error itself.
func (h *Hub) authorize(w http.ResponseWriter, r *http.Request, repoID, filePath string) (*repo, bool) {
	token, hasToken := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	h.mu.Lock()
	rp := h.repos[repoID]
	valid := h.tokens[token]
	h.mu.Unlock()
	switch {
	case hasToken && !valid:
		h.fail(w, r, "hub", filePath, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
	case rp == nil || (rp.access == Private && !rp.granted[token]):
		status := http.StatusUnauthorized
		if hasToken {
			status = http.StatusNotFound
		}
		h.fail(w, r, "hub", filePath, status, "RepoNotFound", "Repository Not Found for url: "+r.URL.Path)
	case rp.access == Gated && !hasToken:
		h.fail(w, r, "hub", filePath, http.StatusUnauthorized, "GatedRepo", "Access to model "+repoID+
			" is restricted. You must have access to it and be authenticated to access it. Please log in.")
	case rp.access == Gated && !rp.granted[token]:
		h.fail(w, r, "hub", filePath, http.StatusForbidden, "GatedRepo", "Access to model "+repoID+
			" is restricted and you are not in the authorized list. Visit "+h.URL+"/"+repoID+" to ask for access.")
	default:
		return rp, true
	}
	return nil, false
}

func (h *Hub) fail(w http.ResponseWriter, r *http.Request, server, filePath string, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	h.record(r, server, filePath, status)
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
}

// ---- CDN ----

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	if h.refuseForbidden(w, r, "cdn") {
		return
	}
	p, ok := strings.CutPrefix(r.URL.EscapedPath(), "/lfs/")
	repoID, rest, ok2 := splitRepo(p)
	commit, escapedPath, _ := strings.Cut(rest, "/")
	filePath, err := url.PathUnescape(escapedPath)
	if !ok || !ok2 || err != nil {
		h.fail(w, r, "cdn", "", http.StatusNotFound, "", "NoSuchKey")
		return
	}
	h.mu.Lock()
	var f *file
	if rp := h.repos[repoID]; rp != nil && rp.commit == commit {
		f = rp.files[filePath]
	}
	expired := r.URL.Query().Get("Signature") != strconv.Itoa(h.signatures)
	h.mu.Unlock()
	switch {
	case f == nil:
		h.fail(w, r, "cdn", filePath, http.StatusNotFound, "", "NoSuchKey")
	case expired:
		h.fail(w, r, "cdn", filePath, http.StatusForbidden, "", "Request has expired")
	case r.Header.Get("Authorization") != "":
		// S3 presigned URLs refuse a second auth mechanism.
		h.fail(w, r, "cdn", filePath, http.StatusBadRequest, "", "Only one auth mechanism allowed")
	default:
		w.Header().Set("ETag", `"`+f.sha256+`"`)
		h.serveBytes(w, r, "cdn", f)
	}
}
