package download

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Bounds on Hub API answers, which we parse as untrusted input. Only this
// package reads them, so they live here rather than in pkg/limits.
const (
	// maxAPIResponse bounds one JSON answer. A tree page holds at most 1000
	// entries of ~300 bytes; model info with siblings is of the same order.
	maxAPIResponse = 16 << 20
	// maxRepoFiles bounds a listing across pages; model repos hold tens to
	// hundreds of files, the Hub's own soft limit is 100k.
	maxRepoFiles = 100_000
	// maxTreePages stops a Link: rel="next" loop.
	maxTreePages = maxRepoFiles / 1000 * 2
	// maxFileSize is far beyond any safetensors shard (the Hub caps single
	// files at 500 GB) and keeps offset arithmetic clear of overflow.
	maxFileSize = 1 << 50
)

var (
	repoIDPattern = regexp.MustCompile(`^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	commitPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha256Pattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// RemoteFile is one file of a repository at a commit.
type RemoteFile struct {
	Path string // slash-separated, relative, validated against traversal
	Size int64
	// SHA256 is the content's sha256 for LFS files (tree lfs.oid); empty
	// for files stored in git.
	SHA256 string
	// GitOID is the git blob sha1 of the content for files stored in git;
	// empty for LFS files (whose tree oid hashes the pointer, not the content).
	GitOID string
}

// IsLFS reports whether the file is stored in LFS (verified by sha256).
func (f RemoteFile) IsLFS() bool { return f.SHA256 != "" }

// blobName is the cache's name for the content: the etag the Hub gives it.
func (f RemoteFile) blobName() string {
	if f.SHA256 != "" {
		return f.SHA256
	}
	return f.GitOID
}

// IsCommit reports whether rev is a full 40-hex commit id.
func IsCommit(rev string) bool { return commitPattern.MatchString(rev) }

func validateRepoID(repo string) error {
	if !repoIDPattern.MatchString(repo) || strings.Contains(repo, "..") {
		return fmt.Errorf("repository %q is not a Hub repo id: expected org/name", repo)
	}
	return nil
}

// validateRevision refuses revisions that could escape refs/ when written
// to the cache (refs/<revision>).
func validateRevision(rev string) error {
	if rev == "" || len(rev) > 256 || !filepath.IsLocal(rev) || path.Clean(rev) != rev ||
		strings.ContainsAny(rev, "\\\x00") {
		return fmt.Errorf("revision %q is not a branch, tag or commit name", rev)
	}
	return nil
}

// validateRepoPath refuses absolute paths, "..", backslashes and other
// spellings that would place a file outside snapshots/<commit>.
func validateRepoPath(p string) error {
	if p == "" || p == "." || len(p) > 4096 || path.Clean(p) != p || !filepath.IsLocal(p) ||
		strings.ContainsAny(p, "\\\x00") || strings.HasPrefix(p, "/") {
		return fmt.Errorf("the Hub listed an unsafe file path %q", p)
	}
	return nil
}

func (c *Client) apiURL(format string, args ...any) (string, error) {
	if _, err := c.endpointURL(); err != nil {
		return "", err
	}
	return c.Endpoint + fmt.Sprintf(format, args...), nil
}

// getJSON GETs a Hub API URL and decodes at most maxAPIResponse bytes into
// out. It returns the response headers (for pagination).
func (c *Client) getJSON(ctx context.Context, rawURL, repo, rev string, out any) (http.Header, error) {
	req, err := c.newRequest(ctx, http.MethodGet, rawURL)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	// Follow redirects (a renamed repository answers 307); the token is
	// dropped on any hop off the Hub host.
	resp, err := c.retryClient(true).Do(req)
	if err != nil {
		closeBody(resp)
		return nil, c.requestError(http.MethodGet, rawURL, err)
	}
	defer resp.Body.Close()
	if herr := c.hubErrorFrom(resp, repo, rev, ""); herr != nil {
		return nil, herr
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %w", rawURL, c.statusError(resp))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIResponse+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", rawURL, err)
	}
	if len(body) > maxAPIResponse {
		return nil, fmt.Errorf("GET %s: answer larger than %d bytes", rawURL, maxAPIResponse)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return nil, fmt.Errorf("GET %s: the Hub's answer is not the expected JSON: %w", rawURL, err)
	}
	return resp.Header, nil
}

func closeBody(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
}

// ResolveRevision turns a branch, tag or commit into the 40-hex commit it
// names now (GET /api/models/{repo}/revision/{rev}), so every file of a
// snapshot comes from the same commit.
func (c *Client) ResolveRevision(ctx context.Context, repo, rev string) (string, error) {
	if err := validateRepoID(repo); err != nil {
		return "", err
	}
	if err := validateRevision(rev); err != nil {
		return "", err
	}
	u, err := c.apiURL("/api/models/%s/revision/%s", repo, url.PathEscape(rev))
	if err != nil {
		return "", err
	}
	var info struct {
		SHA string `json:"sha"`
	}
	if _, err := c.getJSON(ctx, u, repo, rev, &info); err != nil {
		return "", err
	}
	if !IsCommit(info.SHA) {
		return "", fmt.Errorf("%s@%s: the Hub answered commit %q, not 40 hex digits", repo, rev, info.SHA)
	}
	if IsCommit(rev) && info.SHA != rev {
		return "", fmt.Errorf("%s@%s: the Hub resolved the commit to %s", repo, rev, info.SHA)
	}
	return info.SHA, nil
}

type treeEntry struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"`
	LFS  *struct {
		OID  string `json:"oid"`
		Size int64  `json:"size"`
	} `json:"lfs"`
}

// ListFiles lists every file of repo at commit (GET
// /api/models/{repo}/tree/{commit}?recursive=true, following Link: next).
func (c *Client) ListFiles(ctx context.Context, repo, commit string) ([]RemoteFile, error) {
	if err := validateRepoID(repo); err != nil {
		return nil, err
	}
	if !IsCommit(commit) {
		return nil, fmt.Errorf("ListFiles wants a 40-hex commit, got %q: call ResolveRevision first", commit)
	}
	next, err := c.apiURL("/api/models/%s/tree/%s?recursive=true&expand=false", repo, commit)
	if err != nil {
		return nil, err
	}
	var files []RemoteFile
	seen := map[string]bool{}
	for page := 0; next != ""; page++ {
		if page >= maxTreePages {
			return nil, fmt.Errorf("%s@%s: the tree listing has more than %d pages", repo, commit, maxTreePages)
		}
		var entries []treeEntry
		hdr, err := c.getJSON(ctx, next, repo, commit, &entries)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			f, ok, err := fileFromTreeEntry(e)
			if err != nil {
				return nil, fmt.Errorf("%s@%s: %w", repo, commit, err)
			}
			if !ok {
				continue
			}
			if seen[f.Path] {
				return nil, fmt.Errorf("%s@%s: the tree lists %q twice", repo, commit, f.Path)
			}
			seen[f.Path] = true
			if files = append(files, f); len(files) > maxRepoFiles {
				return nil, fmt.Errorf("%s@%s: more than %d files", repo, commit, maxRepoFiles)
			}
		}
		if next, err = c.nextPage(hdr.Get("Link")); err != nil {
			return nil, fmt.Errorf("%s@%s: %w", repo, commit, err)
		}
	}
	return files, nil
}

// fileFromTreeEntry validates one tree entry; ok=false for directories.
func fileFromTreeEntry(e treeEntry) (RemoteFile, bool, error) {
	if e.Type != "file" {
		return RemoteFile{}, false, nil
	}
	if err := validateRepoPath(e.Path); err != nil {
		return RemoteFile{}, false, err
	}
	f := RemoteFile{Path: e.Path, Size: e.Size}
	if e.LFS != nil {
		f.SHA256 = strings.ToLower(e.LFS.OID)
		if !sha256Pattern.MatchString(f.SHA256) {
			return RemoteFile{}, false, fmt.Errorf("%s: LFS oid %q is not a sha256", e.Path, e.LFS.OID)
		}
		if e.LFS.Size != e.Size {
			return RemoteFile{}, false, fmt.Errorf("%s: tree size %d differs from LFS size %d", e.Path, e.Size, e.LFS.Size)
		}
	} else {
		f.GitOID = strings.ToLower(e.OID)
		if !commitPattern.MatchString(f.GitOID) {
			return RemoteFile{}, false, fmt.Errorf("%s: git oid %q is not a sha1", e.Path, e.OID)
		}
	}
	if f.Size < 0 || f.Size > maxFileSize {
		return RemoteFile{}, false, fmt.Errorf("%s: implausible size %d", e.Path, f.Size)
	}
	return f, true, nil
}

// nextPage returns the rel="next" target of a Link header, which must stay
// on the Hub host (it will carry the token).
func (c *Client) nextPage(link string) (string, error) {
	target := parseNextLink(link)
	if target == "" {
		return "", nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("bad Link header %q: %w", link, err)
	}
	if !u.IsAbs() {
		ep, err := c.endpointURL()
		if err != nil {
			return "", err
		}
		u = ep.ResolveReference(u)
	}
	if !c.isHubHost(u) {
		return "", fmt.Errorf("the tree listing's next page %s is not on the Hub host", u.Redacted())
	}
	return u.String(), nil
}

// parseNextLink extracts the URL with rel="next" from an RFC 8288 Link
// header, "" if there is none.
func parseNextLink(header string) string {
	for part := range strings.SplitSeq(header, ",") {
		target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
		target = strings.TrimSpace(target)
		if !ok || len(target) < 2 || target[0] != '<' || target[len(target)-1] != '>' {
			continue
		}
		for p := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(strings.TrimSpace(k), "rel") && strings.Trim(strings.TrimSpace(v), `"`) == "next" {
				return target[1 : len(target)-1]
			}
		}
	}
	return ""
}

// resolveURL is the Hub URL of a file at a commit. The repo's "/" stays a
// path separator (an escaped %2F gets a 400).
func (c *Client) resolveURL(repo, commit, filePath string) string {
	parts := strings.Split(filePath, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", c.Endpoint, repo, commit, strings.Join(parts, "/"))
}

// locate HEADs the resolve URL without following absolute redirects, checks
// the Hub's headers against the tree listing, and returns the URL to GET
// the bytes from (the CDN's Location for LFS files).
func (c *Client) locate(ctx context.Context, repo, commit string, f RemoteFile) (string, error) {
	current := c.resolveURL(repo, commit, f.Path)
	client := c.retryClient(false)
	for hops := 0; ; hops++ {
		req, err := c.newRequest(ctx, http.MethodHead, current)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			closeBody(resp)
			return "", fmt.Errorf("%s: %w", f.Path, c.requestError(http.MethodHead, current, err))
		}
		resp.Body.Close()
		if herr := c.hubErrorFrom(resp, repo, commit, f.Path); herr != nil {
			return "", herr
		}
		if err := checkFileHeaders(resp, commit, f); err != nil {
			return "", err
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			return current, nil
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			loc, err := resp.Location()
			if err != nil {
				return "", fmt.Errorf("%s: HTTP %d without a Location", f.Path, resp.StatusCode)
			}
			if !isRelativeRedirect(resp.Header.Get("Location")) {
				return loc.String(), nil
			}
			if hops >= 5 {
				return "", fmt.Errorf("%s: more than 5 relative redirects from the Hub", f.Path)
			}
			current = loc.String()
		default:
			return "", fmt.Errorf("%s: HEAD %s: %w", f.Path, current, c.statusError(resp))
		}
	}
}

func isRelativeRedirect(loc string) bool {
	u, err := url.Parse(loc)
	return err == nil && !u.IsAbs() && u.Host == ""
}

// checkFileHeaders compares what the resolve endpoint says with the tree
// listing: two Hub answers that disagree mean we cannot know what to verify.
func checkFileHeaders(resp *http.Response, commit string, f RemoteFile) error {
	h := resp.Header
	if got := h.Get("X-Repo-Commit"); got != "" && got != commit {
		return fmt.Errorf("%s: the Hub served commit %s, we asked for %s", f.Path, got, commit)
	}
	if f.IsLFS() {
		if etag := normalizeETag(h.Get("X-Linked-Etag")); etag != "" && etag != f.SHA256 {
			return fmt.Errorf("%s: the Hub disagrees with itself about the sha256: X-Linked-Etag %s, tree lfs.oid %s",
				f.Path, etag, f.SHA256)
		}
	}
	if size := h.Get("X-Linked-Size"); size != "" {
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n != f.Size {
			return fmt.Errorf("%s: the Hub disagrees with itself about the size: X-Linked-Size %q, tree size %d",
				f.Path, size, f.Size)
		}
	}
	return nil
}

// normalizeETag strips a weak marker and quotes: W/"abc" → abc.
func normalizeETag(v string) string {
	return strings.ToLower(strings.Trim(strings.TrimPrefix(strings.TrimSpace(v), "W/"), `"`))
}
