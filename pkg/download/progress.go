package download

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Plan is what a Snapshot call is about to do.
type Plan struct {
	Files        int   // files to download
	Bytes        int64 // their total size
	ResumedBytes int64 // of Bytes, already present from an interrupted run
	ReusedFiles  int   // files already in the cache, not downloaded
}

// Progress receives a Snapshot's events. Methods are called from several
// goroutines at once and must not block for long.
type Progress interface {
	// Plan is called once, before any transfer.
	Plan(Plan)
	// Transferred reports n bytes written; n is negative when a failed
	// attempt's bytes are taken back (its chunk will be fetched again).
	Transferred(n int64)
	// FileDone reports a file verified and in place; reused means it was
	// already in the cache.
	FileDone(path string, size int64, reused bool)
	// Retrying reports that attempt number attempt (1 for the first) at
	// the chunk starting at offset failed and will be retried.
	Retrying(path string, offset int64, attempt int, err error)
}

// NopProgress ignores every event.
type NopProgress struct{}

func (NopProgress) Plan(Plan)                          {}
func (NopProgress) Transferred(int64)                  {}
func (NopProgress) FileDone(string, int64, bool)       {}
func (NopProgress) Retrying(string, int64, int, error) {}

// Reporter renders Progress for a person. On a terminal it draws one
// aggregate bar (bytes, rate, ETA) that a ticker updates from an atomic
// counter, so retries can roll bytes back without upsetting the bar
// (progressbar refuses to pass its max, hf-download.md §4.2). Elsewhere it
// prints one line per file and per retry.
type Reporter struct {
	w           io.Writer
	interactive bool

	done atomic.Int64
	mu   sync.Mutex // guards bar, stop and line output
	bar  *progressbar.ProgressBar
	max  int64
	stop chan struct{}
	wg   sync.WaitGroup
}

// NewReporter writes to w; interactive selects the bar (pass
// term.IsTerminal of w's descriptor).
func NewReporter(w io.Writer, interactive bool) *Reporter {
	return &Reporter{w: w, interactive: interactive}
}

func (r *Reporter) Plan(p Plan) {
	r.done.Store(p.ResumedBytes)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.interactive {
		fmt.Fprintf(r.w, "download: %d files, %s to fetch (%s already present), %d reused\n",
			p.Files, humanBytes(uint64(p.Bytes-p.ResumedBytes)), humanBytes(uint64(p.ResumedBytes)), p.ReusedFiles)
		return
	}
	if p.Bytes <= 0 || r.bar != nil {
		return
	}
	r.max = p.Bytes
	r.bar = progressbar.NewOptions64(p.Bytes,
		progressbar.OptionSetWriter(r.w),
		progressbar.OptionSetDescription("downloading"),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionFullWidth(),
		progressbar.OptionUseIECUnits(true),
	)
	stop := make(chan struct{})
	r.stop = stop
	r.wg.Go(func() { r.tick(stop) })
}

func (r *Reporter) tick(stop <-chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.mu.Lock()
			r.bar.Set64(min(max(r.done.Load(), 0), r.max))
			r.mu.Unlock()
		}
	}
}

func (r *Reporter) Transferred(n int64) { r.done.Add(n) }

func (r *Reporter) FileDone(path string, size int64, reused bool) {
	if r.interactive {
		return
	}
	verb := "fetched"
	if reused {
		verb = "reused"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "%s %s (%s)\n", verb, path, humanBytes(uint64(size)))
}

func (r *Reporter) Retrying(path string, offset int64, attempt int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := fmt.Sprintf("retrying %s at byte %d after attempt %d failed: %v", path, offset, attempt, err)
	if r.bar != nil {
		progressbar.Bprintln(r.bar, line)
		return
	}
	fmt.Fprintln(r.w, line)
}

// Close stops the bar; call it once Snapshot has returned.
func (r *Reporter) Close() {
	r.mu.Lock()
	stop := r.stop
	r.stop = nil
	r.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bar.Set64(min(max(r.done.Load(), 0), r.max))
	fmt.Fprintln(r.w)
}
