package server

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestStopMatcher(t *testing.T) {
	cases := []struct {
		name   string
		stops  []string
		pieces []string
		want   string // everything emitted
		hit    bool
		match  string // the stop reported
	}{
		{"no stops passes through", nil, []string{"a", "b"}, "ab", false, ""},
		{"stop inside one piece", []string{"END"}, []string{"abcENDdef"}, "abc", true, "END"},
		{"stop split over pieces", []string{"END"}, []string{"abE", "N", "Dx"}, "ab", true, "END"},
		{"false start released", []string{"END"}, []string{"abE", "Nx", "y"}, "abENxy", false, ""},
		{"held prefix flushed at the end", []string{"END"}, []string{"abEN"}, "abEN", false, ""},
		{"earliest of several", []string{"cd", "b"}, []string{"abcd"}, "a", true, "b"},
		{"first listed of two at one place", []string{"bc", "b"}, []string{"abcd"}, "a", true, "bc"},
		{"multibyte stop", []string{"é!"}, []string{"caf", "é", "!", "x"}, "caf", true, "é!"},
		{"multibyte text before a stop", []string{"日本"}, []string{"東京", "日", "x"}, "東京日x", false, ""},
		{"empty stop ignored", []string{""}, []string{"ab"}, "ab", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newStopMatcher(tc.stops)
			var out strings.Builder
			hit := false
			for _, p := range tc.pieces {
				s, h := m.Push(p)
				if !utf8.ValidString(s) {
					t.Fatalf("emitted %q, not whole UTF-8", s)
				}
				out.WriteString(s)
				if h {
					hit = true
					break
				}
			}
			if !hit {
				out.WriteString(m.Flush())
			}
			if out.String() != tc.want || hit != tc.hit || m.Matched() != tc.match {
				t.Fatalf("emitted %q hit %v matched %q, want %q hit %v matched %q", out.String(), hit, m.Matched(), tc.want, tc.hit, tc.match)
			}
		})
	}
}

func TestQueueIsFIFOAndBounded(t *testing.T) {
	q := &queue{limit: 2}
	first, err := q.enqueue()
	if err != nil {
		t.Fatal(err)
	}
	second, _ := q.enqueue()
	third, _ := q.enqueue()
	if _, err := q.enqueue(); err != errQueueFull {
		t.Fatalf("fourth enqueue: %v, want queue full", err)
	}
	order := make(chan string, 2)
	go func() { second.wait(context.Background()); order <- "second"; second.release() }()
	go func() { third.wait(context.Background()); order <- "third"; third.release() }()
	time.Sleep(10 * time.Millisecond)
	first.release()
	if a, b := <-order, <-order; a != "second" || b != "third" {
		t.Fatalf("order %s, %s", a, b)
	}
	if t4, err := q.enqueue(); err != nil || t4.wait(context.Background()) != nil {
		t.Fatal("the queue did not empty")
	} else {
		t4.release()
	}
}

func TestQueueCancelledWaiterLeaves(t *testing.T) {
	q := &queue{limit: 1}
	running, _ := q.enqueue()
	waiter, _ := q.enqueue()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waiter.wait(ctx); err == nil {
		t.Fatal("wait returned nil on a cancelled context")
	}
	waiter.release()
	if q.waiting() != 0 {
		t.Fatal("the cancelled waiter stayed in the queue")
	}
	running.release()
	next, _ := q.enqueue()
	if err := next.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	next.release()
	next.release() // twice is harmless
}
