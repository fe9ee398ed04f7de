package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// errStall is the cause given to an attempt the stall floor aborts.
var errStall = errors.New("stalled: below the speed floor")

// attemptError is one failed chunk attempt. retry says whether fetching the
// chunk again from its start may succeed; expired says the URL was refused
// (a signed CDN URL past its expiry) and must be fetched anew first.
type attemptError struct {
	err     error
	retry   bool
	expired bool
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

func retryable(format string, args ...any) error {
	return &attemptError{err: fmt.Errorf(format, args...), retry: true}
}

func fatal(err error) error { return &attemptError{err: err} }

// chunk is one Range of a file: bytes start..end inclusive of total.
type chunk struct {
	path       string // in the repository, for messages
	index      int
	start, end int64
	total      int64
}

func (ch chunk) length() int64 { return ch.end - ch.start + 1 }

func (ch chunk) String() string {
	return fmt.Sprintf("%s chunk %d (bytes %d-%d of %d)", ch.path, ch.index, ch.start, ch.end, ch.total)
}

// sourceURL is where one file's bytes come from. A signed CDN URL expires
// (typically after an hour), so a 401/403 from it makes us ask the Hub for a
// fresh one; workers that saw the same stale URL share one refresh.
type sourceURL struct {
	mu       sync.Mutex
	current  string
	relocate func(context.Context) (string, error)
}

func (s *sourceURL) get() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

func (s *sourceURL) refresh(ctx context.Context, stale string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current != stale {
		return nil
	}
	u, err := s.relocate(ctx)
	if err != nil {
		return err
	}
	s.current = u
	return nil
}

// fetchChunk makes one attempt at ch and writes it at its own offset in w.
// It returns the chunk's sha256. counted receives every byte written and,
// when the attempt fails, minus the bytes it had counted, so an aggregate
// progress total never overshoots.
func (c *Client) fetchChunk(ctx context.Context, hc *retryablehttp.Client, rawURL string, w io.WriterAt,
	ch chunk, counted func(int64)) (string, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := c.newRequest(actx, http.MethodGet, rawURL)
	if err != nil {
		return "", fatal(err)
	}
	// Always a Range, even for a whole file: the Xet bridge answers an
	// unranged GET of a large file with 400 (hf-download.md §1.11).
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", ch.start, ch.end))
	resp, err := hc.Do(req)
	if err != nil {
		closeBody(resp)
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		// retryablehttp already retried what can be retried at this level.
		return "", fatal(fmt.Errorf("%v: %w", ch, c.requestError(http.MethodGet, rawURL, err)))
	}
	defer resp.Body.Close()
	if err := c.checkChunkResponse(resp, ch); err != nil {
		return "", err
	}

	var got atomic.Int64
	stop := watchStall(actx, cancel, &got, c.StallBytes, c.StallWindow)
	defer stop()
	sum := sha256.New()
	tally := writerFunc(func(p []byte) (int, error) {
		sum.Write(p)
		got.Add(int64(len(p)))
		counted(int64(len(p)))
		return len(p), nil
	})
	n, err := io.CopyBuffer(io.NewOffsetWriter(w, ch.start),
		io.TeeReader(io.LimitReader(resp.Body, ch.length()), tally), make([]byte, 1<<20))
	if err == nil && n != ch.length() {
		err = fmt.Errorf("short body: %d of %d bytes", n, ch.length())
	}
	if err == nil {
		// Without Content-Length nothing else tells a long body apart.
		var extra [1]byte
		if m, _ := resp.Body.Read(extra[:]); m > 0 {
			err = errors.New("body longer than the requested range")
		}
	}
	if err != nil {
		counted(-got.Load())
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		if errors.Is(context.Cause(actx), errStall) {
			return "", retryable("%v: %w: fewer than %d bytes in %v", ch, errStall, c.StallBytes, c.StallWindow)
		}
		return "", retryable("%v: %w", ch, err)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// checkChunkResponse accepts a 206 for exactly the requested range, or a 200
// only when the range is the whole file (nothing then lands at an offset
// other than 0, and the length and hash checks still apply).
func (c *Client) checkChunkResponse(resp *http.Response, ch chunk) error {
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if err := checkContentRange(resp.Header.Get("Content-Range"), ch); err != nil {
			return err
		}
	case http.StatusOK:
		if ch.start != 0 || ch.end != ch.total-1 {
			return retryable("%v: the server ignored the Range header (HTTP 200 instead of 206)", ch)
		}
	case http.StatusUnauthorized, http.StatusForbidden:
		if c.isHubHost(resp.Request.URL) {
			return fatal(c.hubErrorFrom(resp, "", "", ch.path))
		}
		return &attemptError{err: fmt.Errorf("%v: the CDN refused the signed URL (HTTP %d)", ch, resp.StatusCode),
			retry: true, expired: true}
	case http.StatusRequestedRangeNotSatisfiable:
		return fatal(fmt.Errorf("%v: the server says the range is past the end of the file (HTTP 416): "+
			"the file is shorter than the Hub's listing claims", ch))
	default:
		return fatal(fmt.Errorf("%v: %w", ch, c.statusError(resp)))
	}
	if resp.ContentLength >= 0 && resp.ContentLength != ch.length() {
		return retryable("%v: Content-Length %d, want %d", ch, resp.ContentLength, ch.length())
	}
	return nil
}

// checkContentRange requires exactly "bytes start-end/total". A different
// total is not retried: the file on the server is not the one the Hub
// listed.
func checkContentRange(header string, ch chunk) error {
	var start, end, total int64
	if n, err := fmt.Sscanf(header, "bytes %d-%d/%d", &start, &end, &total); err != nil || n != 3 ||
		header != fmt.Sprintf("bytes %d-%d/%d", start, end, total) {
		return retryable("%v: malformed Content-Range %q", ch, header)
	}
	if total != ch.total {
		return fatal(fmt.Errorf("%v: the server's copy has %d bytes, the Hub lists %d (Content-Range %q)",
			ch, total, ch.total, header))
	}
	if start != ch.start || end != ch.end {
		return retryable("%v: wrong Content-Range %q", ch, header)
	}
	return nil
}

// watchStall enforces the stall floor: every window, the attempt must have
// received at least minBytes since the previous check, or it is cancelled
// with errStall. An idle timer that resets on every byte would let a
// trickling connection live forever (hf-download.md §3.3).
func watchStall(ctx context.Context, cancel context.CancelCauseFunc, got *atomic.Int64,
	minBytes int64, window time.Duration) (stop func()) {
	if minBytes <= 0 || window <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(window)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				now := got.Load()
				if now-last < minBytes {
					cancel(errStall)
					return
				}
				last = now
			}
		}
	}()
	return func() { close(done) }
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// transfer fetches every missing chunk of one partial download, at most
// c.Parallel at a time for this file and len(slots) across all files.
func (c *Client) transfer(ctx context.Context, p *partial, src *sourceURL, path string,
	slots chan struct{}, progress Progress) error {
	missing := p.missingChunks()
	if len(missing) == 0 {
		return nil
	}
	hc := c.retryClient(true)
	work := make(chan int)
	errs := make(chan error, 1)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range min(max(c.Parallel, 1), len(missing)) {
		wg.Go(func() {
			for i := range work {
				if err := c.runChunk(ctx, hc, p, src, path, i, slots, progress); err != nil {
					cancel(err)
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
feed:
	for _, i := range missing {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return context.Cause(ctx)
	}
}

// runChunk fetches chunk i until it is written and journaled, retrying
// failures that a new attempt can fix, with jittered backoff.
func (c *Client) runChunk(ctx context.Context, hc *retryablehttp.Client, p *partial, src *sourceURL,
	path string, i int, slots chan struct{}, progress Progress) error {
	start, end := chunkRange(i, p.j.Size, p.j.ChunkSize)
	ch := chunk{path: path, index: i, start: start, end: end, total: p.j.Size}
	for attempt := 0; ; attempt++ {
		rawURL := src.get()
		sum, err := c.fetchInSlot(ctx, hc, rawURL, p, ch, slots, progress)
		if err == nil {
			return p.markDone(i, sum)
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var ae *attemptError
		if !errors.As(err, &ae) || !ae.retry {
			return err
		}
		if attempt >= c.MaxRetries {
			return fmt.Errorf("giving up after %d attempts: %w", attempt+1, err)
		}
		progress.Retrying(path, start, attempt+1, err)
		if ae.expired {
			if err := src.refresh(ctx, rawURL); err != nil {
				return fmt.Errorf("%v: fetching a fresh download URL: %w", ch, err)
			}
		}
		if err := sleepCtx(ctx, c.backoff(c.RetryWaitMin, c.RetryWaitMax, attempt, nil)); err != nil {
			return err
		}
	}
}

func (c *Client) fetchInSlot(ctx context.Context, hc *retryablehttp.Client, rawURL string, p *partial,
	ch chunk, slots chan struct{}, progress Progress) (string, error) {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
	defer func() { <-slots }()
	return c.fetchChunk(ctx, hc, rawURL, p.f, ch, progress.Transferred)
}
