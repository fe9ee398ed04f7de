package httpapi

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// NewHTTPServer returns an http.Server with the timeouts a public-facing
// server needs: slow-header and slow-body clients are cut off. There is no
// WriteTimeout, since generation can take minutes; each stream write has
// its own deadline instead (package sse).
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// newConnGrace is how long a connection that has sent nothing yet is
// safe from being closed for a newcomer; idleGrace is that for a
// keep-alive connection between requests. Closing an idle connection
// races with its client sending the next request on it (HTTP/1.1 has no
// way to say "don't"), and a POST that meets the close fails: clients
// such as Go's do not retry it. A connection idle for a second is rarely
// about to be reused; a busy client's is reused within milliseconds.
const (
	newConnGrace = time.Second
	idleGrace    = time.Second
	// bodyGrace is that for a request whose body is still arriving.
	bodyGrace = 3 * time.Second
	// crowdedFor is how long after a newcomer found every connection
	// open responses say Connection: close, so that clients let go of
	// connections knowingly instead of having idle ones closed under them.
	crowdedFor = time.Second
)

// LimitConnections returns ln serving at most n connections of hs at once,
// bounding the goroutines and buffers clients can make the server hold.
// When all n are open and another client connects, the connection idle
// the longest (a keep-alive connection idle for a second or more between
// requests, or one that has sent nothing or only part of its headers for
// a second) is closed to make room, else one whose request body has been
// arriving for 3 s, so that idle and trickling connections cannot lock
// clients out; only when none of them is there does the newcomer wait.
// For a second after that, responses carry Connection: close (see
// crowded). It chains hs.ConnState and hs.ConnContext, which must be set
// before.
func LimitConnections(hs *http.Server, ln net.Listener, n int) net.Listener {
	l := &connLimiter{Listener: ln, n: max(n, 1), conns: map[*limitConn]struct{}{},
		changed: make(chan struct{}, 1), closed: make(chan struct{})}
	prevCtx := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		if lc, ok := c.(*limitConn); ok {
			ctx = context.WithValue(ctx, connKey{}, lc)
		}
		return ctx
	}
	prev := hs.ConnState
	hs.ConnState = func(c net.Conn, s http.ConnState) {
		if lc, ok := c.(*limitConn); ok {
			l.setState(lc, s)
		}
		if prev != nil {
			prev(c, s)
		}
	}
	return l
}

type connLimiter struct {
	net.Listener
	n         int
	changed   chan struct{} // a connection closed or went idle
	closed    chan struct{}
	closeOnce sync.Once

	mu           sync.Mutex
	conns        map[*limitConn]struct{}
	crowdedUntil time.Time // see crowded
}

type limitConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
	// guarded by l.mu
	state     http.ConnState
	since     time.Time
	bodySince time.Time // zero unless a request body is being read
}

type connKey struct{}

// readingBody records on the connection of the request whose context is
// ctx that its handler waits for the body (on) or no longer does.
func readingBody(ctx context.Context, on bool) {
	lc, ok := ctx.Value(connKey{}).(*limitConn)
	if !ok {
		return
	}
	lc.l.mu.Lock()
	defer lc.l.mu.Unlock()
	if on {
		lc.bodySince = time.Now()
	} else {
		lc.bodySince = time.Time{}
	}
}

// crowded reports whether the connection of the request whose context
// is ctx should be closed after its response: a newcomer found every
// connection open less than crowdedFor ago. The client then opens a new
// connection for its next request, which the server admits as this one
// closes, instead of keeping one idle that a newcomer would have closed,
// possibly just as the client sends a request on it.
func crowded(ctx context.Context) bool {
	lc, ok := ctx.Value(connKey{}).(*limitConn)
	if !ok {
		return false
	}
	lc.l.mu.Lock()
	defer lc.l.mu.Unlock()
	return time.Now().Before(lc.l.crowdedUntil)
}

func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if len(l.conns) < l.n {
			lc := &limitConn{Conn: c, l: l, state: http.StateNew, since: time.Now()}
			l.conns[lc] = struct{}{}
			l.mu.Unlock()
			return lc, nil
		}
		l.crowdedUntil = time.Now().Add(crowdedFor)
		victim, wait := l.victimLocked()
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-l.changed:
		case <-t.C:
		case <-l.closed:
			t.Stop()
			c.Close()
			return nil, net.ErrClosed
		}
		t.Stop()
	}
}

// maxAcceptWait bounds how long a newcomer at the limit waits before
// the connections are looked at again: closes and connections going idle
// are signalled, a body that starts arriving is not.
const maxAcceptWait = 250 * time.Millisecond

// victimLocked picks the connection to close for a newcomer: the one
// idle the longest (for idleGrace at least), else one that has sent
// nothing or part of its headers for newConnGrace, else one whose request
// body has been arriving for bodyGrace. Without one, it returns how long
// until the first connection comes of age (a newcomer waits that long,
// not a fixed poll, since a long wait is latency for a client that
// merely opened a new connection).
func (l *connLimiter) victimLocked() (*limitConn, time.Duration) {
	var idle, fresh, trickle *limitConn
	now := time.Now()
	wait := maxAcceptWait
	eligible := func(since time.Time, grace time.Duration) bool {
		age := now.Sub(since)
		if age < grace {
			wait = min(wait, grace-age)
		}
		return age >= grace
	}
	for c := range l.conns {
		switch c.state {
		case http.StateActive:
			if !c.bodySince.IsZero() && eligible(c.bodySince, bodyGrace) && (trickle == nil || c.bodySince.Before(trickle.bodySince)) {
				trickle = c
			}
		case http.StateIdle:
			if eligible(c.since, idleGrace) && (idle == nil || c.since.Before(idle.since)) {
				idle = c
			}
		case http.StateNew:
			if eligible(c.since, newConnGrace) && (fresh == nil || c.since.Before(fresh.since)) {
				fresh = c
			}
		}
	}
	switch {
	case idle != nil:
		return idle, 0
	case fresh != nil:
		return fresh, 0
	case trickle != nil:
		return trickle, 0
	}
	return nil, max(wait, time.Millisecond)
}

func (l *connLimiter) setState(c *limitConn, s http.ConnState) {
	l.mu.Lock()
	if _, ok := l.conns[c]; ok {
		c.state, c.since, c.bodySince = s, time.Now(), time.Time{}
	}
	l.mu.Unlock()
	if s == http.StateIdle {
		l.signal()
	}
}

func (l *connLimiter) signal() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *connLimiter) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		c.l.signal()
	})
	return err
}
