package server

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is returned when --queue-limit requests already wait.
var errQueueFull = errors.New("queue full")

// queue runs up to slots generations at a time (the engine's Parallel, 1
// by default); up to limit more wait in FIFO order.
type queue struct {
	mu      sync.Mutex
	limit   int
	slots   int // 0 counts as 1
	running int
	waiters []*ticket
	onIdle  func() // called (under mu) when the last job leaves
}

// ticket is a place in the queue.
type ticket struct {
	q       *queue
	turn    chan struct{} // closed when the ticket holds the engine
	holding bool          // guarded by q.mu
	done    bool          // released; guarded by q.mu
}

// enqueue takes a place without waiting, or fails at once when the queue
// is full, so the adapter can answer 429 before it starts a response.
func (q *queue) enqueue() (*ticket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := &ticket{q: q, turn: make(chan struct{})}
	if q.running < max(q.slots, 1) && len(q.waiters) == 0 {
		q.running++
		t.holding = true
		close(t.turn)
		return t, nil
	}
	if len(q.waiters) >= q.limit {
		return nil, errQueueFull
	}
	q.waiters = append(q.waiters, t)
	return t, nil
}

// tryTake takes the turn when nothing runs or waits, else returns nil.
func (q *queue) tryTake() *ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running > 0 || len(q.waiters) > 0 {
		return nil
	}
	t := &ticket{q: q, turn: make(chan struct{}), holding: true}
	close(t.turn)
	q.running = 1
	return t
}

// wait blocks until the ticket holds the engine or ctx ends.
func (t *ticket) wait(ctx context.Context) error {
	select {
	case <-t.turn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives the engine to the next waiter, or leaves the queue.
// It is safe to call more than once.
func (t *ticket) release() {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if !t.holding {
		for i, w := range q.waiters {
			if w == t {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				break
			}
		}
		return
	}
	if len(q.waiters) == 0 {
		if q.running--; q.running == 0 && q.onIdle != nil {
			q.onIdle()
		}
		return
	}
	next := q.waiters[0]
	q.waiters = q.waiters[1:]
	next.holding = true
	close(next.turn)
}

// setSlots sets how many generations run at once. More than 1 is for one
// engine serving them all: with several models, switching waits for none.
func (q *queue) setSlots(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.slots = n
	for q.running < max(n, 1) && len(q.waiters) > 0 {
		next := q.waiters[0]
		q.waiters = q.waiters[1:]
		next.holding = true
		q.running++
		close(next.turn)
	}
}

// busy is the number of generations holding a turn.
func (q *queue) busy() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}

// waiting is the number of queued requests (not the running ones).
func (q *queue) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}
