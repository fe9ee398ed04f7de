package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nvmai/nvmai/pkg/cliutil/clitest"
)

// serve answers GET / with the web page, and --no-webui turns it off (the
// API stays).
func TestServeWebUIFlag(t *testing.T) {
	install := tinyInstall(t)
	for _, tc := range []struct {
		flags []string
		page  int
	}{
		{nil, http.StatusOK},
		{[]string{"--no-webui"}, http.StatusNotFound},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan clitest.Result, 1)
		go func() {
			done <- clitest.RunWith(t, app(), clitest.Options{Ctx: ctx}, append([]string{"serve", "--model", install, "--port", port}, tc.flags...)...)
		}()
		get := func(path string) int {
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := http.Get("http://127.0.0.1:" + port + path)
				if err == nil {
					resp.Body.Close()
					return resp.StatusCode
				}
				if time.Now().After(deadline) {
					t.Fatalf("serve %v: GET %s: %v", tc.flags, path, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		page, script, health := get("/"), get("/ui/app.js"), get("/health")
		cancel()
		r := <-done
		if page != tc.page || script != tc.page || (health != http.StatusOK && health != http.StatusServiceUnavailable) {
			t.Errorf("serve %v: GET / %d, /ui/app.js %d, /health %d; want %d, %d and the API up; stderr %q", tc.flags, page, script, health, tc.page, tc.page, r.Stderr)
		}
	}
}
