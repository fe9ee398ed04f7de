package main

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

// The piped reader takes lines of any length up to its limit; a longer one
// is read to its end and refused by number, and the lines after it still come.
func TestPipeReaderLineLimit(t *testing.T) {
	input := "short\n" + strings.Repeat("x", 17) + "\n" + strings.Repeat("y", 16) + "\r\n" +
		strings.Repeat("z", 16) + "\rtail\n" + strings.Repeat("w", 100000) + "\nlast"
	r := newPipeReaderLimit(strings.NewReader(input), 16)
	type read struct {
		line    string
		tooLong int64 // the line number a *lineTooLongError names, 0 for none
	}
	want := []read{{"short", 0}, {"", 2}, {strings.Repeat("y", 16), 0}, {"", 4}, {"", 5}, {"last", 0}}
	for i, w := range want {
		got, err := r.ReadLine("")
		var tl *lineTooLongError
		switch {
		case w.tooLong != 0:
			if !errors.As(err, &tl) || tl.line != w.tooLong {
				t.Fatalf("read %d: %q, %v; want line %d too long", i, got, err, w.tooLong)
			}
			if msg := err.Error(); msg != "line "+strconv.FormatInt(w.tooLong, 10)+" is longer than 16 B; it was not sent" {
				t.Errorf("message %q", msg)
			}
		case err != nil || got != w.line:
			t.Fatalf("read %d: %q, %v; want %q", i, got, err, w.line)
		}
	}
	if _, err := r.ReadLine(""); !errors.Is(err, io.EOF) {
		t.Errorf("after the last line: %v, want EOF", err)
	}
}

// A line too long for the chat is not sent, says so by line number, and the
// conversation goes on; inside a """ block it drops the whole block.
func TestChatPipedLineTooLongIsNotSentAndChatGoesOn(t *testing.T) {
	input := "first message\n" + strings.Repeat("x", 200) + "\nsecond message\n" +
		`"""` + "\nkept out\n" + strings.Repeat("y", 200) + "\nalso out\n" + `"""` + "\nthird message\n"
	h := newChatHarness(t, newPipeReaderLimit(strings.NewReader(input), 64), func() *fakeSession { return &fakeSession{reply: []int{10}, stopID: 99} })
	if err := h.ch.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	users := h.userMessages(0)
	if want := []string{"first message", "second message", "third message"}; strings.Join(users, "|") != strings.Join(want, "|") {
		t.Errorf("messages %q, want %q", users, want)
	}
	for _, notice := range []string{
		"(line 2 is longer than 64 B; it was not sent)",
		"(line 6 is longer than 64 B; the multi-line message holding it was not sent)",
	} {
		if !strings.Contains(h.info.String(), notice) {
			t.Errorf("no notice %q:\n%s", notice, h.info.String())
		}
	}
	if len(h.sessions) != 1 {
		t.Errorf("%d sessions: the conversation was restarted", len(h.sessions))
	}
}

// A message far over the context is refused before its exact encoding and
// the chat goes on.
func TestChatMessageFarOverTheContextIsNotSent(t *testing.T) {
	huge := strings.Repeat("word ", 200000) // 1 MB: many chunks
	h := newChatHarness(t, newPipeReaderLimit(strings.NewReader("hello\n"+huge+"\nbye\n"), 4<<20), func() *fakeSession { return &fakeSession{reply: []int{10}, stopID: 99} })
	h.ch.maxContext = 256
	if err := h.ch.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := len(h.sessions[0].prompts); n != 2 {
		t.Errorf("%d turns sent, want 2 (hello, bye)", n)
	}
	if !strings.Contains(h.info.String(), "more than the context limit of 256 tokens; shorten the prompt or raise --max-context; the message was not sent") {
		t.Errorf("notices:\n%s", h.info.String())
	}
}
