package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix"
	"github.com/nvmai/nvmai/internal/testfix/fixinstall"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"

	_ "github.com/nvmai/nvmai/pkg/gpu" // registers the gpu device
)

// serve --engine gpu --parallel N (issue #39 item 4): each request served
// among others through the GPU engine's batched step gets the text, finish
// and token count it gets alone (TestParallelServingMatchesAlone's
// requests: greedy and seeded, a long prompt prefilled between the
// others' steps, a prompt-cache resume, a cancel, a stop string, JSON
// mode), on 2 and 4 slots, arriving together, staggered or in reverse.
// Skips without a GPU (NVMAI_GPU=1: fails).
func TestGPUParallelServingMatchesAlone(t *testing.T) {
	cudatest.Need(t)
	src := testfix.Embedded(t)
	if d := os.Getenv("NVMAI_GPU_FIXTURES"); d != "" {
		if p := filepath.Join(d, "tiny-moe-fused"); isGPUFixture(p) {
			src = p
		}
	}
	e, err := runtime.Load(fixinstall.Install(t, src, 8), runtime.Options{Device: model.GPU, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if !e.CanBatch() {
		t.Fatal("the GPU engine has no batched step (Engine.CanBatch)")
	}
	reqs, prompts := parRequests(t, e)
	alone := runAlone(t, e, reqs, prompts)
	if !errors.Is(alone[3].err, context.Canceled) {
		t.Fatalf("the cancelled request ended with %v", alone[3].err)
	}
	biggest := 0
	for _, n := range []int{2, 4} {
		for _, sc := range []struct {
			name   string
			arrive []int
		}{
			{"together", []int{0, 0, 0, 0, 0, 0, 0}},
			{"staggered", []int{0, 0, 2, 3, 5, 7, 1}},
			{"reversed", []int{30, 25, 20, 15, 10, 5, 0}},
		} {
			t.Run(fmt.Sprintf("n%d/%s", n, sc.name), func(t *testing.T) {
				rs := append([]parReq(nil), reqs...)
				for i := range rs {
					rs[i].arrive = sc.arrive[i]
				}
				got, r, largest := runBatched(t, e, n, rs, prompts, 64<<20)
				defer r.Close()
				for i := range rs {
					if d := same(got[i], alone[i]); d != "" {
						t.Errorf("request %d: %s", i, d)
					}
				}
				biggest = max(biggest, largest)
			})
		}
	}
	if biggest < 2 {
		t.Errorf("no step batched two sequences")
	}
}

// isGPUFixture reports whether the fixture directory p exists.
func isGPUFixture(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
