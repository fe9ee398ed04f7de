package servertest

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nvmai/nvmai/pkg/server"
)

// Models is a fake server.Models: each model is an Engine that answers
// "model <id>" and records, like Load and Unload, an event in the shared
// log, so a test sees the order of loads, generations and unloads.
type Models struct {
	IDs     []string
	Context int              // each model's context (default 4096)
	Fail    map[string]error // Load of these ids fails with the error
	// Gate, when set, is received from before each generation starts, so a
	// test can hold the running request.
	Gate chan struct{}

	mu     sync.Mutex
	events []string
	loaded map[string]*Engine
}

// List implements server.Models.
func (m *Models) List() []server.ModelInfo {
	ids := slices.Clone(m.IDs)
	slices.Sort(ids)
	out := make([]server.ModelInfo, len(ids))
	for i, id := range ids {
		out[i] = server.ModelInfo{ID: id, Context: m.context()}
	}
	return out
}

func (m *Models) context() int {
	if m.Context == 0 {
		return 4096
	}
	return m.Context
}

// Load implements server.Models.
func (m *Models) Load(id string) (server.Engine, server.Renderer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.loaded) > 0 {
		return nil, nil, fmt.Errorf("servertest: load %s while %v is loaded", id, m.loaded)
	}
	if err := m.Fail[id]; err != nil {
		m.events = append(m.events, "fail "+id)
		return nil, nil, err
	}
	e := &Engine{Context: m.context(), Script: func(prompt string) []string {
		if m.Gate != nil {
			<-m.Gate
		}
		m.record("gen " + id + " " + lastUser(prompt))
		return []string{"model ", id}
	}}
	if m.loaded == nil {
		m.loaded = map[string]*Engine{}
	}
	m.loaded[id] = e
	m.events = append(m.events, "load "+id)
	return e, Renderer{}, nil
}

// Unload implements server.Models.
func (m *Models) Unload(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.loaded, id)
	m.events = append(m.events, "unload "+id)
}

// Events returns the log: "load a", "gen a <last user message>",
// "unload a", "fail b".
func (m *Models) Events() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

// Resident lists the ids loaded now.
func (m *Models) Resident() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id := range m.loaded {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *Models) record(ev string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, ev)
}

// lastUser is the last user message of a prompt Renderer rendered.
func lastUser(prompt string) string {
	i := strings.LastIndex(prompt, "<|im_start|>user\n")
	if i < 0 {
		return prompt
	}
	rest := prompt[i+len("<|im_start|>user\n"):]
	if j := strings.Index(rest, "<|im_end|>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}
