package download

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReporterPrintsLinesWhenNotATerminal(t *testing.T) {
	var out bytes.Buffer
	r := NewReporter(&out, false)
	r.Plan(Plan{Files: 2, Bytes: 3 << 20, ResumedBytes: 1 << 20, ReusedFiles: 1})
	r.Transferred(2 << 20)
	r.Retrying("model.safetensors", 64<<20, 1, errors.New("stalled"))
	r.FileDone("model.safetensors", 3<<20, false)
	r.FileDone("config.json", 10, true)
	r.Close()
	for _, want := range []string{
		"2 files, 2 MiB", "1 MiB already present", "1 reused",
		"retrying model.safetensors at byte 67108864 after attempt 1 failed: stalled",
		"fetched model.safetensors (3 MiB)\n", "reused config.json (10 B)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestReporterBarSurvivesRollbackAndOvershoot(t *testing.T) {
	var out syncBuffer
	r := NewReporter(&out, true)
	r.Plan(Plan{Files: 1, Bytes: 1000})
	r.Transferred(600)
	r.Transferred(-600) // a failed attempt taken back
	r.Transferred(1200) // more than planned must not error or panic
	time.Sleep(300 * time.Millisecond)
	r.Retrying("x", 0, 1, errors.New("short body"))
	r.Close()
	r.Close()
	if !strings.Contains(out.String(), "downloading") || !strings.Contains(out.String(), "short body") {
		t.Errorf("bar output:\n%q", out.String())
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
