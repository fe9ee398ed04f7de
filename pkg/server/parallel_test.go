package server

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/jsonconstrain"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/sample"
)

// parReq is one request of an interleaving test.
type parReq struct {
	prompt string
	max    int
	p      sample.Params
	stop   string // onToken says stop once the text holds it
	cancel int    // the request's context ends after this many tokens (0: never)
	json   bool   // JSON mode (the format masker)
	arrive int    // it arrives after the scheduler's arrive-th item, a step or other work (0: at the start)
}

type parResult struct {
	text string
	out  Outcome
	err  error
}

func seeded(seed uint64) sample.Params {
	return sample.Params{Temperature: 0.9, TopP: 0.95, TopK: 30, Seed: seed}
}

// serveOne runs q on r as a server's request does: text streamed through
// onToken, a stop string checked there, a context cancelled mid-way.
func serveOne(ctx context.Context, r *RuntimeEngine, q parReq, prompt []int) parResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var text strings.Builder
	n := 0
	g := Generation{Prompt: prompt, MaxTokens: q.max, Sampling: q.p}
	if q.json {
		g.Format = jsonconstrain.ObjectMode(jsonconstrain.DefaultOptions)
	}
	out, err := r.Generate(ctx, g, func(s string) bool {
		text.WriteString(s)
		if n++; q.cancel > 0 && n == q.cancel {
			cancel()
		}
		return q.stop == "" || !strings.Contains(text.String(), q.stop)
	})
	return parResult{text: text.String(), out: out, err: err}
}

// same reports how a batched result differs from the one alone (""
// when it does not): the text, the finish, the completion tokens, and
// the error (a cancelled one on both sides).
func same(got, alone parResult) string {
	switch {
	case (got.err == nil) != (alone.err == nil) || got.err != nil && !(errors.Is(got.err, context.Canceled) && errors.Is(alone.err, context.Canceled)):
		return fmt.Sprintf("error %v, alone %v", got.err, alone.err)
	case got.text != alone.text:
		return fmt.Sprintf("text %q, alone %q", got.text, alone.text)
	case got.err == nil && (got.out.Finish != alone.out.Finish || got.out.CompletionTokens != alone.out.CompletionTokens):
		return fmt.Sprintf("finish %s after %d tokens, alone %s after %d", got.out.Finish, got.out.CompletionTokens, alone.out.Finish, alone.out.CompletionTokens)
	}
	return ""
}

// runAlone serves each request on its own fresh one-slot engine.
func runAlone(t testing.TB, e *runtime.Engine, reqs []parReq, prompts [][]int) []parResult {
	t.Helper()
	return runAloneWith(t, e, RuntimeOptions{PrefillChunk: 8}, reqs, prompts)
}

// runAloneWith is runAlone on engines made with opt.
func runAloneWith(t testing.TB, e *runtime.Engine, opt RuntimeOptions, reqs []parReq, prompts [][]int) []parResult {
	t.Helper()
	res := make([]parResult, len(reqs))
	for i, q := range reqs {
		r := NewRuntimeEngine(e, opt)
		res[i] = serveOne(context.Background(), r, q, prompts[i])
		r.Close()
	}
	return res
}

// runBatched serves reqs on one engine of n slots, each arriving after
// the scheduler item its arrive names: the scheduler's hook starts it and
// waits until its first work is queued (or it waits for a slot), so it
// arrives there whatever the timing. Requests whose item never comes
// (everything before them ended) start once the others end, those of the
// earliest arrive together.
func runBatched(t testing.TB, e *runtime.Engine, n int, reqs []parReq, prompts [][]int, cacheBytes int64) (res []parResult, r *RuntimeEngine, largest int) {
	t.Helper()
	return runBatchedWith(t, e, RuntimeOptions{Parallel: n, ParallelPass: 5, PrefillChunk: 8, CacheBytes: cacheBytes}, reqs, prompts)
}

// runBatchedWith is runBatched on an engine made with opt.
func runBatchedWith(t testing.TB, e *runtime.Engine, opt RuntimeOptions, reqs []parReq, prompts [][]int) (res []parResult, r *RuntimeEngine, largest int) {
	t.Helper()
	n := opt.Parallel
	r = NewRuntimeEngine(e, opt)
	if r.Parallel() != n {
		t.Fatalf("Parallel %d, asked %d", r.Parallel(), n)
	}
	res = make([]parResult, len(reqs))
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		launched = make([]bool, len(reqs))
		big      int // the largest step, written by the scheduler's hook
	)
	launch := func(i int) *joinSignals {
		js := &joinSignals{queued: make(chan struct{}), waiting: make(chan struct{})}
		launched[i] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = serveOne(context.WithValue(context.Background(), joinKey{}, js), r, reqs[i], prompts[i])
		}()
		return js
	}
	r.sched.afterEvent = func(event, size int) {
		if size > n {
			t.Errorf("a batch of %d on %d slots", size, n)
		}
		mu.Lock()
		defer mu.Unlock()
		big = max(big, size)
		for i, q := range reqs {
			if q.arrive == event && !launched[i] {
				js := launch(i)
				select {
				case <-js.queued:
				case <-js.waiting:
				}
			}
		}
	}
	mu.Lock()
	for i, q := range reqs {
		if q.arrive == 0 {
			launch(i)
		}
	}
	mu.Unlock()
	for {
		wg.Wait()
		mu.Lock()
		next := -1
		for i, q := range reqs {
			if !launched[i] && (next < 0 || q.arrive < next) {
				next = q.arrive
			}
		}
		left := next >= 0
		for i, q := range reqs {
			if !launched[i] && q.arrive == next {
				launch(i)
			}
		}
		mu.Unlock()
		if !left {
			break
		}
	}
	mu.Lock()
	largest = big
	mu.Unlock()
	return res, r, largest
}

// parRequests are the interleaving tests' requests: greedy and seeded,
// short and long prompts (a long one prefills in several passes between
// the others' steps), two sharing a system prompt (the second resumes
// from a snapshot another slot made), different max_tokens, one cancelled
// mid-way, one ended by a stop string, one in JSON mode, one of a single
// token.
func parRequests(t testing.TB, e *runtime.Engine) ([]parReq, [][]int) {
	t.Helper()
	sys := "<|im_start|>system\nYou are a terse assistant who answers in one line.<|im_end|>\n"
	chat := func(user string) string {
		return sys + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"
	}
	reqs := []parReq{
		{prompt: chat("Name a colour."), max: 12, p: sample.Params{TopP: 1}},
		{prompt: chat("Name a fruit."), max: 10, p: seeded(7)},
		{prompt: chat(strings.Repeat("Count the words in this long sentence, please. ", 4)), max: 6, p: sample.Params{TopP: 1}},
		{prompt: "The quick brown fox", max: 12, p: seeded(3), cancel: 3},
		{prompt: "Once upon a time", max: 16, p: sample.Params{TopP: 1}},
		{prompt: chat("Describe a pet as JSON."), max: 24, p: seeded(11), json: true},
		{prompt: "Hello", max: 1, p: seeded(5)},
	}
	prompts := make([][]int, len(reqs))
	for i, q := range reqs {
		prompts[i] = e.Tokenizer.Encode(q.prompt)
	}
	// The stop string is a piece of what the request writes alone, so it
	// does end it early.
	free := runAlone(t, e, reqs[4:5], prompts[4:5])[0]
	if len(free.text) < 6 {
		t.Fatalf("the stop request's text %q is too short to cut", free.text)
	}
	reqs[4].stop = free.text[3:5]
	return reqs, prompts
}

// Each request served among others on 2, 3 or 4 slots, arriving at
// different steps, gets the text, finish and token count it gets alone on
// a fresh one-slot engine; the engine leaves no goroutine after Close.
func TestParallelServingMatchesAlone(t *testing.T) {
	e := tinyEngine(t)
	reqs, prompts := parRequests(t, e)
	alone := runAlone(t, e, reqs, prompts)
	if alone[4].out.Finish != FinishStopped || !errors.Is(alone[3].err, context.Canceled) {
		t.Fatalf("the stop request ended %s, the cancelled one with %v", alone[4].out.Finish, alone[3].err)
	}
	schedules := []struct {
		name   string
		arrive []int
	}{
		{"together", []int{0, 0, 0, 0, 0, 0, 0}},
		{"staggered", []int{0, 0, 2, 3, 5, 7, 1}},
		{"late", []int{0, 4, 4, 9, 2, 6, 12}},
		{"reversed", []int{30, 25, 20, 15, 10, 5, 0}},
		{"pairs", []int{0, 6, 0, 6, 14, 14, 3}},
	}
	base := goruntime.NumGoroutine()
	var hits int64
	biggest := 0 // the largest batched step of the whole table
	for _, n := range []int{2, 3, 4} {
		for _, sc := range schedules {
			t.Run(fmt.Sprintf("n%d/%s", n, sc.name), func(t *testing.T) {
				rs := append([]parReq(nil), reqs...)
				for i := range rs {
					rs[i].arrive = sc.arrive[i]
				}
				got, r, largest := runBatched(t, e, n, rs, prompts, 64<<20)
				for i := range rs {
					if d := same(got[i], alone[i]); d != "" {
						t.Errorf("request %d: %s", i, d)
					}
				}
				biggest = max(biggest, largest)
				hits += r.CacheStats().Hits
				r.Close()
			})
		}
	}
	if hits == 0 {
		t.Error("no request resumed from the prompt cache")
	}
	if biggest < 2 {
		t.Errorf("no step batched two sequences")
	}
	waitGoroutines(t, base)
}

// waitGoroutines fails unless the goroutine count falls back to base.
func waitGoroutines(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for goruntime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", goruntime.NumGoroutine(), base, buf[:goruntime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A failed batched step fails the requests of that batch, the others
// carry on, and the failed slots serve the next requests as a fresh
// engine does (their sessions reset).
func TestParallelStepFailureFailsItsBatchOnly(t *testing.T) {
	e := tinyEngine(t)
	reqs, prompts := parRequests(t, e)
	alone := runAlone(t, e, reqs, prompts)
	base := goruntime.NumGoroutine()
	r := NewRuntimeEngine(e, RuntimeOptions{Parallel: 3, ParallelPass: 5, CacheBytes: 64 << 20})
	injected := errors.New("injected step failure")
	var once sync.Once
	var failed []*runtime.Decoder
	r.sched.stepBatch = func(ds []*runtime.Decoder, ids []int) error {
		err := error(nil)
		if len(ds) >= 2 {
			once.Do(func() { failed, err = ds, injected })
		}
		if err != nil {
			return err
		}
		return e.StepBatch(ds, ids)
	}
	var wg sync.WaitGroup
	got := make([]parResult, 3)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = serveOne(context.Background(), r, reqs[i], prompts[i])
		}()
	}
	wg.Wait()
	nfailed := 0
	for i, g := range got {
		if errors.Is(g.err, injected) {
			nfailed++
			continue
		}
		if d := same(g, alone[i]); d != "" {
			t.Errorf("request %d, not in the failed step: %s", i, d)
		}
	}
	if nfailed != len(failed) || nfailed < 2 {
		t.Fatalf("%d requests failed, the failed step had %d", nfailed, len(failed))
	}
	// Every slot, the failed ones included, serves as a fresh engine does.
	var wg2 sync.WaitGroup
	for i := range 3 {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if d := same(serveOne(context.Background(), r, reqs[i], prompts[i]), alone[i]); d != "" {
				t.Errorf("request %d after the failure: %s", i, d)
			}
		}()
	}
	wg2.Wait()
	r.Close()
	waitGoroutines(t, base)
}

// A request whose callback panics (net/http recovers a handler's panic)
// leaves the batch: the others end as they do alone, and its slot serves
// the next request.
func TestParallelCallbackPanicLeavesOthersAlone(t *testing.T) {
	e := tinyEngine(t)
	reqs, prompts := parRequests(t, e)
	alone := runAlone(t, e, reqs, prompts)
	r := NewRuntimeEngine(e, RuntimeOptions{Parallel: 2, ParallelPass: 5})
	defer r.Close()
	var wg sync.WaitGroup
	var other parResult
	var recovered any
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer func() { recovered = recover() }()
		n := 0
		r.Generate(context.Background(), Generation{Prompt: prompts[4], MaxTokens: 16}, func(string) bool {
			if n++; n == 2 {
				panic("callback failure")
			}
			return true
		})
	}()
	go func() {
		defer wg.Done()
		other = serveOne(context.Background(), r, reqs[0], prompts[0])
	}()
	wg.Wait()
	if recovered != "callback failure" {
		t.Fatalf("recovered %v", recovered)
	}
	if d := same(other, alone[0]); d != "" {
		t.Fatalf("the other request: %s", d)
	}
	for i := range 2 {
		if d := same(serveOne(context.Background(), r, reqs[4], prompts[4]), alone[4]); d != "" {
			t.Fatalf("request after the panic (%d): %s", i, d)
		}
	}
}

// The queue runs up to slots requests at once, in FIFO order; limit more
// wait and the next is refused; a waiter that gives up leaves its place,
// and a running one that ends admits the first waiter at once.
func TestQueueRunsSlotsAtOnce(t *testing.T) {
	for _, slots := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(slots), func(t *testing.T) {
			q := &queue{limit: 2}
			q.setSlots(slots)
			var running []*ticket
			for range slots {
				tk, err := q.enqueue()
				if err != nil {
					t.Fatal(err)
				}
				if err := tk.wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				running = append(running, tk)
			}
			w1, err1 := q.enqueue()
			w2, err2 := q.enqueue()
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if _, err := q.enqueue(); !errors.Is(err, errQueueFull) {
				t.Fatalf("a request beyond %d running and 2 waiting: %v", slots, err)
			}
			if q.busy() != slots || q.waiting() != 2 {
				t.Fatalf("busy %d waiting %d", q.busy(), q.waiting())
			}
			w1.release() // gave up waiting
			w3, err := q.enqueue()
			if err != nil {
				t.Fatal(err)
			}
			running[0].release()
			select {
			case <-w2.turn:
			default:
				t.Fatal("the first waiter did not get the freed place")
			}
			select {
			case <-w3.turn:
				t.Fatal("the second waiter got a place while all were taken")
			default:
			}
			w2.release()
			<-w3.turn
			w3.release()
			for _, tk := range running[1:] {
				tk.release()
			}
			if q.busy() != 0 || q.waiting() != 0 {
				t.Fatalf("busy %d waiting %d after every release", q.busy(), q.waiting())
			}
		})
	}
}

// A snapshot one slot made seeds a request on another slot; and with a
// prompt cache so small that every snapshot put evicts another, slots
// restoring while others evict still give every request its text alone
// (a looked-up snapshot stays whole after its entry is evicted).
func TestParallelSlotsShareThePromptCache(t *testing.T) {
	e := tinyEngine(t)
	reqs, prompts := parRequests(t, e)
	alone := runAlone(t, e, reqs, prompts)
	r := NewRuntimeEngine(e, RuntimeOptions{Parallel: 2, ParallelPass: 5, CacheBytes: 64 << 20})
	first := serveOne(context.Background(), r, reqs[0], prompts[0])
	firstSlot := r.slots[0]
	if firstSlot.used == 0 {
		firstSlot = r.slots[1]
	}
	second := serveOne(context.Background(), r, reqs[1], prompts[1]) // the system prompt of the first
	if d := same(first, alone[0]); d != "" {
		t.Fatal(d)
	}
	if d := same(second, alone[1]); d != "" {
		t.Fatal(d)
	}
	if second.out.CachedTokens == 0 {
		t.Fatal("the second conversation reused nothing of the first's system prompt")
	}
	for _, sl := range r.slots {
		if sl != firstSlot && sl.used == 0 {
			t.Fatal("the second request ran on the first one's slot, not another")
		}
	}
	r.Close()
	for _, n := range []int{2, 4} {
		rs := append([]parReq(nil), reqs...)
		got, r, _ := runBatched(t, e, n, rs, prompts, 300<<10)
		for i := range rs {
			if d := same(got[i], alone[i]); d != "" {
				t.Errorf("%d slots, a cache of 300 KiB: request %d: %s", n, i, d)
			}
		}
		if st := r.CacheStats(); st.Evictions == 0 {
			t.Errorf("%d slots: no eviction in a 300 KiB cache: %+v", n, st)
		}
		r.Close()
	}
}

// FuzzBatchedServing draws the slots, the requests (prompt, max_tokens,
// greedy or seeded sampling, a cancel, JSON mode) and their arrivals from
// the input: every request's result equals its run alone.
func FuzzBatchedServing(f *testing.F) {
	f.Add([]byte{0, 3, 5, 0, 0, 1, 7, 2, 9, 3, 3, 4})
	f.Add([]byte{1, 0, 12, 1, 0, 2, 3, 3, 5, 4, 2, 6, 7, 1, 1})
	f.Add([]byte{2, 4, 2, 3, 9, 0, 8, 1, 1, 2, 6, 5, 0, 3, 4, 4, 11, 0, 2, 5})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	e, err := runtime.Load(fixinstall.Install(f, testfix.Embedded(f), 8), runtime.Options{Threads: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(e.Close)
	texts := []string{
		"<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n",
		"<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n",
		"The quick brown fox jumps over the lazy dog, and then",
		"Hi",
		"<|im_start|>user\n" + strings.Repeat("A longer question that takes a few prefill passes. ", 3) + "<|im_end|>\n<|im_start|>assistant\n",
	}
	var prompts [][]int
	for _, s := range texts {
		prompts = append(prompts, e.Tokenizer.Encode(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		n := 2 + int(data[0])%3
		data = data[1:]
		var reqs []parReq
		var ps [][]int
		for len(data) >= 3 && len(reqs) < 6 {
			a, b, c := data[0], data[1], data[2]
			data = data[3:]
			q := parReq{max: 1 + int(b)%12, arrive: int(c) % 10}
			if a&1 == 1 {
				q.p = seeded(uint64(b))
			} else {
				q.p = sample.Params{TopP: 1}
			}
			if a&6 == 6 {
				q.cancel = 1 + int(c)%3
			}
			if a&8 != 0 && a&16 != 0 {
				q.json, q.max = true, 4+int(b)%16
			}
			reqs = append(reqs, q)
			ps = append(ps, prompts[int(a>>5)%len(prompts)])
		}
		if len(reqs) == 0 {
			return
		}
		alone := runAlone(t, e, reqs, ps)
		got, r, _ := runBatched(t, e, n, reqs, ps, 1<<20)
		r.Close()
		for i := range reqs {
			if d := same(got[i], alone[i]); d != "" {
				t.Errorf("%d slots, request %d %+v: %s", n, i, reqs[i], d)
			}
		}
	})
}

// With experts streamed through a small cache (4 of 16 slots per layer,
// read-ahead on), batched serving still gives every request its output
// alone: a step reads each routed expert once for the whole batch.
func TestParallelServingStreamedExperts(t *testing.T) {
	e, err := runtime.Load(fixinstall.Install(t, testfix.Embedded(t), 8), runtime.Options{Threads: 1, Experts: runtime.ExpertOptions{Slots: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if st := e.ExpertStats(); st.SlotsPerLayer != 4 {
		t.Fatalf("%d slots per layer", st.SlotsPerLayer)
	}
	reqs, prompts := parRequests(t, e)
	alone := runAlone(t, e, reqs, prompts)
	for _, sc := range [][]int{{0, 0, 0, 0, 0, 0, 0}, {0, 6, 0, 6, 14, 14, 3}} {
		rs := append([]parReq(nil), reqs...)
		for i := range rs {
			rs[i].arrive = sc[i]
		}
		got, r, _ := runBatched(t, e, 3, rs, prompts, 64<<20)
		r.Close()
		for i := range rs {
			if d := same(got[i], alone[i]); d != "" {
				t.Errorf("arrivals %v: request %d: %s", sc, i, d)
			}
		}
	}
	if st := e.ExpertStats(); st.Misses == 0 {
		t.Fatalf("no expert was read: %+v", st)
	}
}

// With every slot replaying one synthetic agent-regime routing source
// (RuntimeOptions.Routing), batched serving gives every request the output
// it gets alone under the same replay, on resident and streamed experts;
// and the replay is what routed them (some output differs from the
// router's).
func TestParallelServingReplaysRouting(t *testing.T) {
	resident := tinyEngine(t)
	streamed, err := runtime.Load(fixinstall.Install(t, testfix.Embedded(t), 8), runtime.Options{Threads: 1, Experts: runtime.ExpertOptions{Slots: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer streamed.Close()
	for _, e := range []*runtime.Engine{resident, streamed} {
		geom, err := e.RoutingGeometry()
		if err != nil {
			t.Fatal(err)
		}
		src, err := routing.NewSynthetic(geom, routing.Spec{Regime: routing.Agent, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		replay := func(int) model.RouteOverride { return src }
		reqs, prompts := parRequests(t, e)
		router := runAlone(t, e, reqs, prompts)
		alone := runAloneWith(t, e, RuntimeOptions{PrefillChunk: 8, Routing: replay}, reqs, prompts)
		differs := false
		for i := range reqs {
			differs = differs || same(alone[i], router[i]) != ""
		}
		if !differs {
			t.Fatal("every request's output under the replay is the router's: the test cannot tell them apart")
		}
		for _, sc := range [][]int{{0, 0, 0, 0, 0, 0, 0}, {0, 6, 0, 6, 14, 14, 3}} {
			rs := append([]parReq(nil), reqs...)
			for i := range rs {
				rs[i].arrive = sc[i]
			}
			got, r, largest := runBatchedWith(t, e, RuntimeOptions{Parallel: 3, ParallelPass: 5, PrefillChunk: 8, CacheBytes: 64 << 20, Routing: replay}, rs, prompts)
			r.Close()
			if largest < 2 {
				t.Errorf("arrivals %v: no step batched two sequences", sc)
			}
			for i := range rs {
				if d := same(got[i], alone[i]); d != "" {
					t.Errorf("arrivals %v: request %d: %s", sc, i, d)
				}
			}
		}
	}
}
