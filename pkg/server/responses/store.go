package responses

import (
	"sync"

	"github.com/nvmai/nvmai/pkg/chattemplate"
)

// store holds the conversations of the newest responses, so that a
// request can continue one with previous_response_id. It is bounded by
// count (the oldest goes first); entries are never changed once added.
type store struct {
	mu    sync.Mutex
	limit int
	order []string // oldest first
	convs map[string][]chattemplate.Message
}

func newStore(limit int) *store {
	return &store{limit: limit, convs: map[string][]chattemplate.Message{}}
}

// put keeps conv (input and output of response id), evicting the oldest
// beyond the limit. A limit of 0 keeps nothing.
func (s *store) put(id string, conv []chattemplate.Message) {
	if s.limit <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.convs[id]; !ok {
		s.order = append(s.order, id)
	}
	s.convs[id] = conv
	for len(s.order) > s.limit {
		delete(s.convs, s.order[0])
		s.order = s.order[1:]
	}
}

// get returns the conversation of id; callers must not modify it.
func (s *store) get(id string) ([]chattemplate.Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.convs[id]
	return c, ok
}

func (s *store) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.convs)
}
