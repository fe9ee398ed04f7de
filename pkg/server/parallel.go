package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nvmai/nvmai/pkg/runtime"
)

// DefaultParallelPass is the most prompt tokens a request joining running
// generations prefills between two of their batched steps: a running
// stream waits at most one such pass per step while another request
// prefills.
const DefaultParallelPass = 64

// MaxParallel is the most generations --parallel runs at once.
const MaxParallel = 16

// generateParallel is Generate with several slots: the request takes a
// free slot (the one whose held tokens the prompt extends furthest, else
// the least recently used), resumes and prefills there in passes
// interleaved with the running generations' steps, then decodes in the
// scheduler's batch. Its sampling is the runtime's Decoder, the code
// Session.Generate runs, so its tokens are those it gets alone.
func (r *RuntimeEngine) generateParallel(ctx context.Context, g Generation, onToken func(string) bool) (Outcome, error) {
	var out Outcome
	sl, err := r.acquire(ctx, g.Prompt)
	if err != nil {
		return out, err
	}
	defer r.release(sl)
	defer r.flushDisk()
	defer func() {
		// A callback that panics (net/http recovers it) must not leave the
		// slot at a position nobody can name.
		if p := recover(); p != nil {
			r.fail(sl, nil)
			panic(p)
		}
	}()
	start := time.Now()
	constraint, err := r.begin(ctx, sl, g, start, &out)
	if err != nil {
		return out, err
	}
	var first time.Duration
	d, err := sl.sess.NewDecoder(r.generateOptions(g, constraint, start, &first, &out, onToken))
	if err != nil {
		return out, r.fail(sl, err)
	}
	if err := r.sched.decode(ctx, d); err != nil {
		return out, r.fail(sl, err)
	}
	r.finished(sl, g, d.Result(), first, &out)
	return out, nil
}

// joinKey is a context key for tests forcing a request's arrival between
// two given steps: its *joinSignals are closed once the request's first
// work is queued to the scheduler (queued), or when it must wait for a
// slot (waiting).
type joinKey struct{}

type joinSignals struct{ queued, waiting chan struct{} }

func joinHooks(ctx context.Context) *joinSignals {
	j, _ := ctx.Value(joinKey{}).(*joinSignals)
	return j
}

// acquire takes a free slot for prompt, waiting for one (the server's
// queue admits no more requests than slots, so it waits only when
// Generate is called directly).
func (r *RuntimeEngine) acquire(ctx context.Context, prompt []int) (*slot, error) {
	select {
	case <-r.free:
	default:
		if j := joinHooks(ctx); j != nil {
			close(j.waiting)
		}
		select {
		case <-r.free:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.free <- struct{}{}
		return nil, errEngineClosed
	}
	var best *slot
	bestLive := -1
	for _, sl := range r.slots {
		if sl.busy {
			continue
		}
		live := 0
		if len(sl.held) < len(prompt) && slices.Equal(sl.held, prompt[:len(sl.held)]) {
			live = len(sl.held)
		}
		if live > bestLive || live == bestLive && sl.used < best.used {
			best, bestLive = sl, live
		}
	}
	r.clock++
	best.busy, best.used = true, r.clock
	return best, nil
}

func (r *RuntimeEngine) release(sl *slot) {
	r.mu.Lock()
	sl.busy = false
	if r.closed {
		sl.sess.Close()
		sl.held = nil
	}
	r.mu.Unlock()
	r.free <- struct{}{}
}

// scheduler owns the model while several generations run: it steps every
// decoding sequence in one batched step (runtime.Engine.StepBatch) once
// each has handed over its next token, and runs the other work that
// touches the model (prefill passes, snapshots, restores, resets) one item
// at a time between steps: at most one item after each step while
// sequences decode (a prefill pass then of at most ParallelPass tokens),
// back to back while none does.
type scheduler struct {
	e    *runtime.Engine
	in   chan schedMsg
	quit chan struct{}
	done chan struct{}
	// decoding says, to the item the loop runs, whether sequences are
	// decoding (a prefill pass is then kept short); only the loop's
	// goroutine touches it.
	decoding bool
	// stepBatch is e.StepBatch (tests inject failures).
	stepBatch func(ds []*runtime.Decoder, ids []int) error
	// afterEvent, when set (tests), is called after each step and each
	// other item with their count so far (from 1) and the step's size (0
	// for another item).
	afterEvent func(event, size int)
}

type schedKind int

const (
	msgRun   schedKind = iota // run fn
	msgJoin                   // d starts decoding
	msgFeed                   // feed id to d in the next step
	msgLeave                  // d has ended
)

type schedMsg struct {
	kind   schedKind
	fn     func() error
	d      *runtime.Decoder
	id     int
	reply  chan error // msgRun, msgFeed (buffered)
	queued chan struct{}
}

func newScheduler(e *runtime.Engine) *scheduler {
	s := &scheduler{e: e, stepBatch: e.StepBatch, in: make(chan schedMsg, 2*MaxParallel), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// close stops the loop; what is queued or sent later fails with
// errEngineClosed.
func (s *scheduler) close() {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	<-s.done
}

// send queues m and waits for its reply when it has one.
func (s *scheduler) send(m schedMsg) error {
	select {
	case s.in <- m:
		if m.queued != nil {
			close(m.queued)
		}
	case <-s.done:
		return errEngineClosed
	}
	if m.reply == nil {
		return nil
	}
	select {
	case err := <-m.reply:
		return err
	case <-s.done:
		select { // answered just before the loop ended
		case err := <-m.reply:
			return err
		default:
			return errEngineClosed
		}
	}
}

// run runs f between two steps; queued, when set, is closed once f is
// queued.
func (s *scheduler) run(f func() error, queued chan struct{}) error {
	return s.send(schedMsg{kind: msgRun, fn: f, reply: make(chan error, 1), queued: queued})
}

// decode generates d in the batch until it ends: its sampling, callbacks
// and stop checks run here, on the request's goroutine, while the others
// do theirs; only the feeding of the picked tokens waits for the step.
// The sequence leaves the batch on its first error, its end, or ctx
// ending (at the next step boundary), without disturbing the others.
func (s *scheduler) decode(ctx context.Context, d *runtime.Decoder) error {
	if err := s.send(schedMsg{kind: msgJoin, d: d}); err != nil {
		return err
	}
	member := true
	defer func() {
		if member { // a callback panicked: the others must not wait for d
			s.send(schedMsg{kind: msgLeave, d: d})
		}
	}()
	reply := make(chan error, 1)
	for {
		id, feed, err := d.Next(ctx)
		if err != nil || !feed {
			member = false
			if lerr := s.send(schedMsg{kind: msgLeave, d: d}); err == nil {
				err = lerr
			}
			return err
		}
		if err := s.send(schedMsg{kind: msgFeed, d: d, id: id, reply: reply}); err != nil {
			member = false // a failed step has already dropped d from the batch
			return err
		}
	}
}

type feedReq struct {
	d     *runtime.Decoder
	id    int
	reply chan error
}

func (s *scheduler) loop() {
	defer close(s.done)
	members := map[*runtime.Decoder]bool{}
	var feeds []feedReq
	var runs []schedMsg
	stepped, events := false, 0
	apply := func(m schedMsg) {
		switch m.kind {
		case msgRun:
			runs = append(runs, m)
		case msgJoin:
			members[m.d] = true
		case msgFeed:
			if members[m.d] {
				feeds = append(feeds, feedReq{m.d, m.id, m.reply})
			} else {
				m.reply <- errStepFailed
			}
		case msgLeave:
			delete(members, m.d)
			feeds = slices.DeleteFunc(feeds, func(f feedReq) bool { return f.d == m.d })
		}
	}
	defer func() { // closed: fail whatever waits
		for _, f := range feeds {
			f.reply <- errEngineClosed
		}
		for _, m := range runs {
			m.reply <- errEngineClosed
		}
	}()
	for {
		stepReady := len(members) > 0 && len(feeds) == len(members)
		runReady := len(runs) > 0 && (len(members) == 0 || stepped)
		if !stepReady && !runReady {
			select {
			case m := <-s.in:
				apply(m)
			case <-s.quit:
				return
			}
		}
	drain:
		for {
			select {
			case m := <-s.in:
				apply(m)
			case <-s.quit:
				return
			default:
				break drain
			}
		}
		switch {
		case len(runs) > 0 && (len(members) == 0 || stepped):
			// One item after each step, so a prefill neither waits for the
			// running streams to end nor stalls them for more than a pass.
			m := runs[0]
			runs = runs[1:]
			s.decoding = len(members) > 0
			m.reply <- m.fn()
			stepped = false
			if events++; s.afterEvent != nil {
				s.afterEvent(events, 0)
			}
		case len(members) > 0 && len(feeds) == len(members):
			ds, ids := make([]*runtime.Decoder, len(feeds)), make([]int, len(feeds))
			for i, f := range feeds {
				ds[i], ids[i] = f.d, f.id
			}
			err := s.stepBatch(ds, ids)
			for _, f := range feeds {
				if err != nil {
					delete(members, f.d) // every state of the batch is unusable; each request resets its own
				}
				f.reply <- err
			}
			feeds, stepped = feeds[:0], true
			if events++; s.afterEvent != nil {
				s.afterEvent(events, len(ds))
			}
		}
	}
}

// errStepFailed answers a feed from a sequence a failed step dropped.
var errStepFailed = errors.New("a batched decode step failed")
