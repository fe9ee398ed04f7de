package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Models is a set of models of which one at a time is loaded (serve
// --models-dir). The server calls Load and Unload only while it holds the
// queue's turn, so never concurrently and never during a generation.
type Models interface {
	// List describes every model that can be served, sorted by ID. It must
	// not change while the server runs; each entry's Context and Sampling
	// are what the loaded engine's Info will say.
	List() []ModelInfo
	// Load loads model id (an ID from List) while no other is loaded.
	Load(id string) (Engine, Renderer, error)
	// Unload frees what Load allocated for id. Tokenize and Render of the
	// unloaded engine must stay safe to call: a request being prepared may
	// still be using them (its tokens stay valid, the model being the same
	// when it is loaded again).
	Unload(id string)
}

// modelSet is the server's state for Models.
type modelSet struct {
	m          Models
	list       []ModelInfo
	byID       map[string]ModelInfo
	idleUnload time.Duration
	unload     *time.Timer // the idle unload, when idleUnload > 0
	resident   string      // guarded by Server.mu
}

// SetModels serves several models, loaded on demand one at a time (see
// docs/server.md, "Several models"). idleUnload > 0 unloads the model
// after that long without requests. It replaces SetEngine.
func (s *Server) SetModels(m Models, idleUnload time.Duration) error {
	list := m.List()
	if len(list) == 0 {
		return fmt.Errorf("no model to serve")
	}
	ms := &modelSet{m: m, list: list, byID: map[string]ModelInfo{}, idleUnload: idleUnload}
	for _, info := range list {
		ms.byID[info.ID] = info
	}
	if idleUnload > 0 {
		ms.unload = time.AfterFunc(time.Hour, s.unloadIdle)
		ms.unload.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = ms
	return nil
}

// Models lists the models served: every listed model with --models-dir,
// else the loaded one (none while it loads).
func (s *Server) Models() []ModelInfo {
	s.mu.RLock()
	ms, e := s.models, s.engine
	s.mu.RUnlock()
	switch {
	case ms != nil:
		return slices.Clone(ms.list)
	case e != nil:
		return []ModelInfo{e.Info()}
	}
	return nil
}

// Loaded is the ID of the model in memory ("" when none).
func (s *Server) Loaded() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.models != nil {
		return s.models.resident
	}
	if s.engine != nil {
		return s.engine.Info().ID
	}
	return ""
}

// InfoFor describes the model a request names (with one model, the one
// loaded), whether it is in memory or not: an adapter fills what the
// request leaves out from its Sampling defaults (the model's, with the
// server's Defaults over them; a nonzero Seed is a default seed, zero means
// each request draws one). Unknown: the zero value
// (PrepareChat then refuses the request).
func (s *Server) InfoFor(model string) ModelInfo {
	info := s.infoFor(model)
	info.Sampling = s.cfg.Defaults.apply(info.Sampling)
	return info
}

func (s *Server) infoFor(model string) ModelInfo {
	s.mu.RLock()
	ms, e := s.models, s.engine
	s.mu.RUnlock()
	if ms != nil {
		if info, err := s.pick(ms, model); err == nil {
			return info
		}
		return ModelInfo{}
	}
	if e != nil {
		return e.Info()
	}
	return ModelInfo{}
}

// maxModelName bounds the unknown name quoted back in an error.
const maxModelName = 200

// pick resolves the model a request names: "" is the loaded model, else
// the first listed.
func (s *Server) pick(ms *modelSet, model string) (ModelInfo, error) {
	if model == "" {
		s.mu.RLock()
		model = ms.resident
		s.mu.RUnlock()
		if model == "" {
			model = ms.list[0].ID
		}
	}
	info, ok := ms.byID[model]
	if !ok {
		if len(model) > maxModelName {
			model = model[:maxModelName] + "…"
		}
		ids := make([]string, len(ms.list))
		for i, m := range ms.list {
			ids[i] = m.ID
		}
		return info, &Error{Kind: KindNotFound, Param: "model", Msg: fmt.Sprintf("the model %q is not served here; the models are: %s (GET /v1/models)", model, strings.Join(ids, ", "))}
	}
	return info, nil
}

// resolve picks the model of a request and returns its engine and renderer
// when it is the one loaded (nil otherwise: the job loads it in its turn).
func (s *Server) resolve(model string) (string, Engine, Renderer, error) {
	s.mu.RLock()
	ms := s.models
	s.mu.RUnlock()
	info, err := s.pick(ms, model)
	if err != nil {
		return "", nil, nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if ms.resident == info.ID {
		return info.ID, s.engine, s.renderer, nil
	}
	return info.ID, nil, nil, nil
}

// ensure makes model id the loaded one, unloading the current; the caller
// holds the queue's turn.
func (s *Server) ensure(id string) (Engine, Renderer, error) {
	s.mu.RLock()
	ms, cur, e, r := s.models, s.models.resident, s.engine, s.renderer
	s.mu.RUnlock()
	if cur == id {
		return e, r, nil
	}
	s.unloadCurrent(ms, cur)
	start := time.Now()
	s.note("loading model %s", id)
	e, r, err := safeLoad(ms.m, id)
	if err != nil {
		s.note("model %s failed to load: %v", id, err)
		return nil, nil, &Error{Kind: KindInternal, Msg: fmt.Sprintf("the model %q failed to load: %v; the server keeps serving the other models", id, err)}
	}
	s.mu.Lock()
	ms.resident, s.engine, s.renderer = id, e, r
	s.mu.Unlock()
	s.loaded.Store(true)
	s.note("model %s loaded in %.1fs", id, time.Since(start).Seconds())
	return e, r, nil
}

// safeLoad turns a panic inside Load into its error: the caller holds the
// queue's turn, which a panic must not take with it.
func safeLoad(m Models, id string) (e Engine, r Renderer, err error) {
	defer func() {
		if p := recover(); p != nil {
			e, r, err = nil, nil, fmt.Errorf("panic while loading: %v", p)
		}
	}()
	return m.Load(id)
}

// unloadCurrent unloads model cur (none when ""), under the queue's turn.
func (s *Server) unloadCurrent(ms *modelSet, cur string) {
	if cur == "" {
		return
	}
	s.mu.Lock()
	ms.resident, s.engine, s.renderer = "", nil, nil
	s.mu.Unlock()
	s.loaded.Store(false)
	ms.m.Unload(cur)
	debug.FreeOSMemory() // the KV cache, prompt cache and session buffers, at once
	s.note("model %s unloaded", cur)
}

// unloadIdle runs when no request came for --idle-unload: it unloads the
// model unless a request holds or waits for the queue.
func (s *Server) unloadIdle() {
	t := s.q.tryTake()
	if t == nil {
		return // busy; the queue going idle again restarts the timer
	}
	defer t.release()
	s.mu.RLock()
	ms, cur := s.models, s.models.resident
	s.mu.RUnlock()
	s.unloadCurrent(ms, cur)
}

// armIdleUnload restarts the idle-unload timer (under the queue's lock,
// when the last job leaves).
func (s *Server) armIdleUnload() {
	s.mu.RLock()
	ms := s.models
	s.mu.RUnlock()
	if ms != nil && ms.unload != nil && s.loaded.Load() {
		ms.unload.Reset(ms.idleUnload)
	}
}

func (s *Server) note(format string, args ...any) {
	if s.cfg.Notice != nil {
		s.cfg.Notice(fmt.Sprintf(format, args...))
	}
}

// NeedsLoad reports whether the job's model was not loaded when the job
// was prepared: its turn then starts by loading it, and refusals that need
// the model (the template, the context) come from Wait or Run. An adapter
// that wants them as an HTTP status calls Wait before it starts a stream.
func (j *Job) NeedsLoad() bool { return j.deferred }

// Model is the ID of the model that serves the job.
func (j *Job) Model() string {
	if j.model != "" {
		return j.model
	}
	return j.e.Info().ID
}

// Wait waits for the job's turn and loads its model if need be; Run then
// starts generating at once. On an error the job's place is freed. Like
// Run, it is called from the request's goroutine only.
func (j *Job) Wait(ctx context.Context) error {
	if !j.began {
		j.began = true
		j.beginErr = j.begin(ctx)
		if j.beginErr != nil {
			j.t.release()
		}
	}
	return j.beginErr
}

func (j *Job) begin(ctx context.Context) error {
	if err := j.t.wait(ctx); err != nil {
		return err
	}
	j.turn = j.s.cfg.Now()
	if j.model == "" {
		return nil // one model: prepared against it
	}
	e, r, err := j.s.ensure(j.model)
	if err != nil {
		return err
	}
	j.e = e
	if !j.deferred {
		return nil
	}
	if j.chat != nil {
		prompt, forced, err := j.s.renderChat(r, j.chat)
		if err != nil {
			return err
		}
		j.forced, j.think = forced, strings.HasSuffix(prompt, "<think>\n")
		return j.check(prompt+forced, j.chat.MaxTokens, j.chat.ClampMaxTokens)
	}
	return j.check(j.comp.Prompt, j.comp.MaxTokens, false)
}
