package server_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

// countingEngine counts Tokenize calls, the most running at once, and the
// limits asked for.
type countingEngine struct {
	*servertest.Engine
	calls, running, most atomic.Int32
	mu                   sync.Mutex
	limits               []int
	delay                time.Duration
}

func (e *countingEngine) Tokenize(text string, limit int) ([]int, bool) {
	e.calls.Add(1)
	n := e.running.Add(1)
	defer e.running.Add(-1)
	for {
		m := e.most.Load()
		if n <= m || e.most.CompareAndSwap(m, n) {
			break
		}
	}
	e.mu.Lock()
	e.limits = append(e.limits, limit)
	e.mu.Unlock()
	time.Sleep(e.delay)
	return e.Engine.Tokenize(text, limit)
}

func newCounting(t *testing.T, queueLimit int) (*server.Server, *countingEngine) {
	t.Helper()
	eng := &countingEngine{Engine: &servertest.Engine{Context: 256}}
	s := server.New(server.Config{QueueLimit: queueLimit, Log: func(server.RequestLog) {}})
	s.SetEngine(eng, servertest.Renderer{})
	return s, eng
}

// A request the queue cannot take is refused before its prompt is
// rendered or tokenized (#44 S23): 32 large prompts for a full queue cost
// no tokenizing at all.
func TestQueueFullRefusesBeforeTokenizing(t *testing.T) {
	s, eng := newCounting(t, 1)
	var held []*server.Job
	for range 2 { // one holds the engine, one waits
		j, err := s.PrepareChat(&server.ChatRequest{Messages: userTurn("hi")})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, j)
	}
	before := eng.calls.Load()
	big := strings.Repeat("x", 1<<20)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.PrepareChat(&server.ChatRequest{Messages: userTurn(big)})
			var se *server.Error
			if !errors.As(err, &se) || se.Kind != server.KindQueueFull {
				t.Errorf("with the queue full: %v, want queue full", err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := s.PrepareCompletion(&server.CompletionRequest{Prompt: big})
		var se *server.Error
		if !errors.As(err, &se) || se.Kind != server.KindQueueFull {
			t.Errorf("completion with the queue full: %v, want queue full", err)
		}
	}()
	wg.Wait()
	if n := eng.calls.Load() - before; n != 0 {
		t.Fatalf("%d prompts tokenized for a full queue, want 0", n)
	}
	for _, j := range held {
		j.Cancel()
	}
}

// A prompt refused after tokenizing gives its queue place back, and an
// over-long one is tokenized only up to the context, the refusal saying
// it has more tokens than that.
func TestOverlongPromptStopsAtTheContextAndFreesItsPlace(t *testing.T) {
	s, eng := newCounting(t, 1)
	for range 3 { // more refusals than the queue has places
		_, err := s.PrepareCompletion(&server.CompletionRequest{Prompt: strings.Repeat("y", 1<<20)})
		var se *server.Error
		if !errors.As(err, &se) || se.Kind != server.KindContextOverflow || !strings.Contains(se.Msg, "more than 256 tokens") {
			t.Fatalf("huge prompt: %v, want a context overflow saying more than 256 tokens", err)
		}
		_, err = s.CountChatTokens(&server.ChatRequest{Messages: userTurn(strings.Repeat("z", 1<<20))})
		if !errors.As(err, &se) || se.Kind != server.KindContextOverflow || !strings.Contains(se.Msg, "more than 256 tokens") {
			t.Fatalf("counting a huge prompt: %v, want a context overflow", err)
		}
	}
	for _, limit := range eng.limits {
		if limit != 256 {
			t.Fatalf("tokenized with limits %v, want the context, 256", eng.limits)
		}
	}
	j, err := s.PrepareChat(&server.ChatRequest{Messages: userTurn("hi")})
	if err != nil {
		t.Fatalf("after refusals the queue must be free: %v", err)
	}
	j.Cancel()
}

// At most two prompts are tokenized at once, however many arrive.
func TestTokenizationRunsInABoundedPool(t *testing.T) {
	s, eng := newCounting(t, 64)
	eng.delay = 2 * time.Millisecond
	var wg sync.WaitGroup
	jobs := make(chan *server.Job, 64)
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				if _, err := s.CountChatTokens(&server.ChatRequest{Messages: userTurn("count me")}); err != nil {
					t.Error(err)
				}
				return
			}
			j, err := s.PrepareChat(&server.ChatRequest{Messages: userTurn("run me")})
			if err != nil {
				t.Error(err)
				return
			}
			jobs <- j
		}()
	}
	wg.Wait()
	close(jobs)
	for j := range jobs {
		j.Cancel()
	}
	if most := eng.most.Load(); most > 2 || most < 1 {
		t.Fatalf("%d tokenizations at once, want at most 2", most)
	}
}
