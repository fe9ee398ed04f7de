package server_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/chattemplate"
	"github.com/nvmai/nvmai/pkg/server"
	"github.com/nvmai/nvmai/pkg/server/servertest"
)

func newModelServer(t *testing.T, m *servertest.Models, idle time.Duration) *server.Server {
	t.Helper()
	off := false // plain answers
	s := server.New(server.Config{QueueLimit: 8, Log: func(server.RequestLog) {}, Thinking: &off})
	if err := s.SetModels(m, idle); err != nil {
		t.Fatal(err)
	}
	return s
}

func chatReq(model, text string) *server.ChatRequest {
	return &server.ChatRequest{Model: model, Messages: []chattemplate.Message{{Role: "user", Content: text}}}
}

// one prepares and runs a chat request, returning its reply.
func one(t *testing.T, s *server.Server, model, text string) (string, error) {
	t.Helper()
	j, err := s.PrepareChat(chatReq(model, text))
	if err != nil {
		return "", err
	}
	res, err := j.RunChat(context.Background(), nil)
	if err != nil {
		return "", err
	}
	if res.Content != "model "+j.Model() {
		t.Errorf("job for %s answered %q", j.Model(), res.Content)
	}
	return res.Content, nil
}

// TestModelsSwitch: each request runs on the model it names, loading it
// after unloading the one in memory; "" is the loaded model, or the first
// listed when none is.
func TestModelsSwitch(t *testing.T) {
	cases := []struct {
		name     string
		requests []string // model of each request, in order
		events   []string
	}{
		{"first request loads", []string{"a"}, []string{"load a", "gen a 0"}},
		{"same model stays", []string{"a", "a"}, []string{"load a", "gen a 0", "gen a 1"}},
		{"switch unloads first", []string{"a", "b", "a"}, []string{"load a", "gen a 0", "unload a", "load b", "gen b 1", "unload b", "load a", "gen a 2"}},
		{"empty names the first listed", []string{""}, []string{"load a", "gen a 0"}},
		{"empty names the loaded", []string{"b", ""}, []string{"load b", "gen b 0", "gen b 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &servertest.Models{IDs: []string{"b", "a"}}
			s := newModelServer(t, m, 0)
			for i, model := range c.requests {
				if _, err := one(t, s, model, fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			if got := m.Events(); !slices.Equal(got, c.events) {
				t.Errorf("events\n got %q\nwant %q", got, c.events)
			}
			if ids := m.Resident(); len(ids) != 1 || ids[0] != s.Loaded() {
				t.Errorf("resident %v, server says %q", ids, s.Loaded())
			}
		})
	}
}

// TestModelsQueueOrderAcrossSwitch: requests run in the order they were
// queued, whatever model each names; a switch happens at the turn of the
// first request for another model, and requests for the old model queued
// behind it load it again in their turn.
func TestModelsQueueOrderAcrossSwitch(t *testing.T) {
	m := &servertest.Models{IDs: []string{"a", "b"}, Gate: make(chan struct{})}
	s := newModelServer(t, m, 0)
	go func() { m.Gate <- struct{}{} }()
	if _, err := one(t, s, "a", "warm"); err != nil {
		t.Fatal(err)
	}
	order := []string{"a", "b", "a", "a", "b"}
	jobs := make([]*server.Job, len(order))
	for i, model := range order {
		j, err := s.PrepareChat(chatReq(model, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = j
	}
	if !jobs[1].NeedsLoad() || jobs[2].NeedsLoad() {
		t.Errorf("NeedsLoad: b %v, a %v; want true for b only (a is loaded)", jobs[1].NeedsLoad(), jobs[2].NeedsLoad())
	}
	var wg sync.WaitGroup
	for i := len(jobs) - 1; i >= 0; i-- { // started in reverse: the queue decides
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := jobs[i].RunChat(context.Background(), nil); err != nil {
				t.Error(err)
			}
		}()
	}
	for range jobs {
		m.Gate <- struct{}{}
	}
	wg.Wait()
	want := []string{"load a", "gen a warm", "gen a 0", "unload a", "load b", "gen b 1", "unload b", "load a", "gen a 2", "gen a 3", "unload a", "load b", "gen b 4"}
	if got := m.Events(); !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}

// TestModelsUnknown: a model not listed is refused at once (404 kind),
// naming the models there; nothing loads.
func TestModelsUnknown(t *testing.T) {
	m := &servertest.Models{IDs: []string{"b", "a"}}
	s := newModelServer(t, m, 0)
	for _, prep := range []func() error{
		func() error { _, err := s.PrepareChat(chatReq("gpt-4o", "hi")); return err },
		func() error {
			_, err := s.PrepareCompletion(&server.CompletionRequest{Model: "gpt-4o", Prompt: "hi"})
			return err
		},
		func() error { _, err := s.ApplyTemplate(chatReq("gpt-4o", "hi")); return err },
	} {
		var se *server.Error
		err := prep()
		if !errors.As(err, &se) || se.Kind != server.KindNotFound || se.Param != "model" || !strings.Contains(se.Msg, `"gpt-4o"`) || !strings.Contains(se.Msg, "a, b") {
			t.Errorf("got %v, want a not-found error naming gpt-4o and the models a, b", err)
		}
	}
	long := strings.Repeat("x", 1<<20)
	if _, err := s.PrepareChat(chatReq(long, "hi")); err == nil || len(err.Error()) > 1024 {
		t.Errorf("a 1 MiB model name: error of %d bytes", len(err.Error()))
	}
	if ev := m.Events(); len(ev) != 0 {
		t.Errorf("events %q, want none", ev)
	}
}

// TestModelsLoadFailure: a model that fails to load answers its requests
// with the reason (internal kind); the server goes on serving the others.
func TestModelsLoadFailure(t *testing.T) {
	m := &servertest.Models{IDs: []string{"a", "bad"}, Fail: map[string]error{"bad": errors.New("resident.bin: sha256 mismatch")}}
	s := newModelServer(t, m, 0)
	if _, err := one(t, s, "a", "0"); err != nil {
		t.Fatal(err)
	}
	j, err := s.PrepareChat(chatReq("bad", "1"))
	if err != nil {
		t.Fatal(err)
	}
	var se *server.Error
	_, err = j.RunChat(context.Background(), nil)
	if !errors.As(err, &se) || se.Kind != server.KindInternal || !strings.Contains(se.Msg, "sha256 mismatch") || !strings.Contains(se.Msg, `"bad"`) {
		t.Errorf("got %v, want the load failure with its reason", err)
	}
	if s.Health() != nil || s.Loaded() != "" {
		t.Errorf("after a failed load: health %v, loaded %q", s.Health(), s.Loaded())
	}
	if _, err := one(t, s, "a", "2"); err != nil {
		t.Fatal(err)
	}
	want := []string{"load a", "gen a 0", "unload a", "fail bad", "load a", "gen a 2"}
	if got := m.Events(); !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}

// panicky is a model set whose Load panics for "boom".
type panicky struct{ *servertest.Models }

func (p panicky) Load(id string) (server.Engine, server.Renderer, error) {
	if id == "boom" {
		panic("index out of range")
	}
	return p.Models.Load(id)
}

// TestModelsLoadPanic: a Load that panics is a load failure; the queue
// goes on.
func TestModelsLoadPanic(t *testing.T) {
	m := &servertest.Models{IDs: []string{"a", "boom"}}
	s := server.New(server.Config{Log: func(server.RequestLog) {}})
	if err := s.SetModels(panicky{m}, 0); err != nil {
		t.Fatal(err)
	}
	j, err := s.PrepareChat(chatReq("boom", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), "panic while loading: index out of range") {
		t.Errorf("Wait: %v", err)
	}
	j, err = s.PrepareChat(chatReq("a", "y"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.RunChat(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// TestModelsDeferredRefusals: a request for a model not loaded takes its
// place at once; what needs the model (its context) is checked in its
// turn, from Wait, which frees the place on failure.
func TestModelsDeferredRefusals(t *testing.T) {
	m := &servertest.Models{IDs: []string{"a", "b"}, Context: 128}
	s := newModelServer(t, m, 0)
	if _, err := one(t, s, "a", "0"); err != nil {
		t.Fatal(err)
	}
	j, err := s.PrepareChat(chatReq("b", strings.Repeat("long ", 40)))
	if err != nil {
		t.Fatalf("prepared at once: %v", err)
	}
	var se *server.Error
	if err := j.Wait(context.Background()); !errors.As(err, &se) || se.Kind != server.KindContextOverflow {
		t.Errorf("Wait: %v, want a context overflow", err)
	}
	if _, err := s.PrepareChat(&server.ChatRequest{Model: "b", MaxTokens: -1}); err == nil {
		t.Error("max_tokens -1 accepted before the load")
	}
	if _, err := s.PrepareCompletion(&server.CompletionRequest{Model: "b"}); err == nil {
		t.Error("an empty prompt accepted before the load")
	}
	// A deferred job cancelled while it waits frees its place.
	ctx, cancel := context.WithCancel(context.Background())
	hold, _ := s.PrepareChat(chatReq("b", "x"))
	waiting, _ := s.PrepareChat(chatReq("a", "y"))
	cancel()
	if err := waiting.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on a cancelled context: %v", err)
	}
	if _, err := hold.RunChat(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := one(t, s, "a", "z"); err != nil {
		t.Fatal(err)
	}
}

// TestModelsIdleUnload: with idleUnload, the model leaves memory once no
// request came for that long, and the next request loads it again.
func TestModelsIdleUnload(t *testing.T) {
	m := &servertest.Models{IDs: []string{"a"}}
	s := newModelServer(t, m, 20*time.Millisecond)
	if _, err := one(t, s, "a", "0"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.Loaded() == "" && len(m.Resident()) == 0 })
	time.Sleep(60 * time.Millisecond) // nothing re-arms the timer with no model
	if _, err := one(t, s, "a", "1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"load a", "gen a 0", "unload a", "load a", "gen a 1"}
	if got := m.Events(); !slices.Equal(got[:len(want)], want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
	if s.Health() != nil {
		t.Errorf("health with no model loaded: %v", s.Health())
	}
}

// TestModelsNoGoroutineLeak: switching, failing and cancelling leave no
// goroutine behind.
func TestModelsNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	m := &servertest.Models{IDs: []string{"a", "b", "bad"}, Fail: map[string]error{"bad": errors.New("broken")}}
	s := newModelServer(t, m, 5*time.Millisecond)
	for i := range 30 {
		model := []string{"a", "b", "bad", ""}[i%4]
		one(t, s, model, fmt.Sprint(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if j, err := s.PrepareChat(chatReq("b", "x")); err == nil {
		j.RunChat(ctx, nil)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestModelsConcurrent: many clients naming models at random, some
// cancelling, some refused by a full queue: every request ends, never two
// models are in memory (the fake refuses a load beside another), and no
// goroutine stays behind.
func TestModelsConcurrent(t *testing.T) {
	before := runtime.NumGoroutine()
	m := &servertest.Models{IDs: []string{"a", "b", "c", "bad"}, Fail: map[string]error{"bad": errors.New("broken")}}
	s := newModelServer(t, m, time.Millisecond)
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			model := []string{"a", "b", "c", "bad", ""}[i%5]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%7 == 0 {
				cancel()
			}
			j, err := s.PrepareChat(chatReq(model, fmt.Sprint(i)))
			if err != nil {
				return // queue full
			}
			_, err = j.RunChat(ctx, nil)
			if err != nil && strings.Contains(err.Error(), "while") {
				t.Errorf("request %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if ids := m.Resident(); len(ids) > 1 {
		t.Errorf("resident %v", ids)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}
