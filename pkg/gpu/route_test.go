package gpu

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmai/nvmai/internal/testfix/routefix"
	"github.com/nvmai/nvmai/pkg/gpu/cuda/cudatest"
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// fixedRoutes is a RouteOverride from a function of (position, layer).
type fixedRoutes func(pos, layer int) ([]int, error)

func (f fixedRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	ids, err := f(pos, layer)
	return append(dst, ids...), err
}

// gatherRoutes lays the override's experts out [layer][t][k], ascending,
// zero at layers without a MoE block, and refuses what the CPU engine's
// replay refuses, naming the layer and position.
func TestGatherRoutes(t *testing.T) {
	moe := []bool{true, false, true}
	const k, E = 3, 8
	for _, tc := range []struct {
		name string
		o    fixedRoutes
		want []int32 // pos 5, T 2
		err  string
	}{
		{name: "sorted per row", o: func(pos, layer int) ([]int, error) { return []int{7 - pos%2, layer, 3}, nil },
			want: []int32{0, 3, 6, 0, 3, 7, 0, 0, 0, 0, 0, 0, 2, 3, 6, 2, 3, 7}},
		{name: "too few", o: func(pos, layer int) ([]int, error) { return []int{1, 2}, nil },
			err: "gpu: layer 0, position 5: the routing override named 2 experts, the model routes each token to 3"},
		{name: "outside the layer", o: func(pos, layer int) ([]int, error) { return []int{1, 2, 8 + layer}, nil },
			err: "gpu: layer 0, position 5: the routing override named expert 8; the layer has experts 0 to 7"},
		{name: "negative", o: func(pos, layer int) ([]int, error) { return []int{-1, 2, 3}, nil },
			err: "named expert -1; the layer has experts 0 to 7"},
		{name: "twice", o: func(pos, layer int) ([]int, error) {
			if layer == 2 && pos == 6 {
				return []int{4, 1, 4}, nil
			}
			return []int{0, 1, 2}, nil
		}, err: "gpu: layer 2, position 6: the routing override named expert 4 twice"},
		{name: "the override's error", o: func(pos, layer int) ([]int, error) {
			if pos == 6 {
				return nil, errors.New("trace too short")
			}
			return []int{0, 1, 2}, nil
		}, err: "gpu: layer 0, position 6: routing override: trace too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stale := []int32{9, 9, 9} // a previous pass's ids, reused
			got, _, err := gatherRoutes(tc.o, moe, 5, 2, k, E, stale, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ids %v, want %v", got, tc.want)
			}
		})
	}
}

// replayOutputs are what the GPU engine must reproduce bitwise under a
// replayed routing: the last prompt token's logits and the greedy tokens.
type replayOutputs struct {
	logits []float32
	greedy []int
}

func replayRun(t *testing.T, e *runtime.Engine, ids []int, o model.RouteOverride, steps int) replayOutputs {
	t.Helper()
	var out replayOutputs
	s := e.NewSession(runtime.SessionOptions{KVInitial: 16, KVBits: 32, Routing: o})
	defer s.Close()
	res, err := s.Generate(context.Background(), ids, runtime.GenerateOptions{MaxTokens: steps + 1, IgnoreEOS: true,
		OnLogits: func(r []float32) error {
			if out.logits == nil {
				out.logits = slices.Clone(r)
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	out.greedy = res.IDs
	return out
}

// switchedRun feeds ids, then steps one token at a time (greedy), with the
// replay switched off for steps [4, 6) and on again after: every step's
// logits. The GPU recaptures its decode graph at each switch.
func switchedRun(t *testing.T, e *runtime.Engine, ids []int, o model.RouteOverride) [][]float32 {
	t.Helper()
	st, err := e.Model().NewState(model.StateOptions{KVInitial: 16, KVBits: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ov, ok := st.(model.RouteOverrider)
	if !ok {
		t.Fatalf("the %s engine's states take no routing override", e.Info().Name)
	}
	ov.SetRouteOverride(o)
	V := e.Install.Manifest.Geometry.VocabSize
	var rows [][]float32
	feed := ids
	for step := range 9 {
		switch step {
		case 4:
			ov.SetRouteOverride(nil)
		case 6:
			ov.SetRouteOverride(o)
		}
		if err := st.Forward(feed); err != nil {
			t.Fatal(err)
		}
		row := make([]float32, V)
		if err := st.Logits(row); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
		next, err := st.Argmax()
		if err != nil {
			t.Fatal(err)
		}
		feed = []int{next}
	}
	return rows
}

// synthSource is routefix.Synthetic (shared with qwen38gpu's tests).
func synthSource(t *testing.T, e *runtime.Engine, spec string) *routing.SyntheticSource {
	t.Helper()
	return routefix.Synthetic(t, e, spec)
}

// compareReplay loads dir on the GPU at slots slots a layer (0: resident)
// and checks its outputs under o against the CPU engine's (want), bitwise.
func compareReplay(t *testing.T, name, dir string, slots int, ids []int, o model.RouteOverride, want replayOutputs, routerBitwise bool) {
	t.Helper()
	e := loadGPUWith(t, dir, slots, 0)
	defer e.Close()
	p := e.Model().(*Backend).Model.Plan()
	if (slots == 0) != p.Resident() || (slots > 0 && p.Slots != slots) {
		t.Fatalf("%s: plan %+v, want %d slots a layer (0: resident)", name, p, slots)
	}
	got := replayRun(t, e, ids, o, len(want.greedy)-1)
	same := 0
	for same < min(len(got.greedy), len(want.greedy)) && got.greedy[same] == want.greedy[same] {
		same++
	}
	t.Logf("FIDELITY replay %s: logits bitwise the CPU engine's %v (rel. error %.2e; the router's own bitwise %v); greedy agrees for %d of %d tokens",
		name, slices.Equal(got.logits, want.logits), cudatest.RelErr(got.logits, want.logits), routerBitwise, same, len(want.greedy))
	if !slices.Equal(got.logits, want.logits) {
		t.Errorf("%s: logits differ from the CPU engine's under the same replay (max %g)", name, cudatest.MaxAbsDiff(got.logits, want.logits))
	}
	if !slices.Equal(got.greedy, want.greedy) {
		t.Errorf("%s: greedy differs from the CPU engine's from token %d", name, same)
	}
}

// Routing replay on the GPU is the CPU engine's: under synthetic:agent
// and synthetic:diverse the tiny-moe fixture at 4 and 8 bits gives bitwise
// the CPU engine's logits after a prompt of several prefill passes
// (NVMAI_GPU_CHUNK=128) and its 64 greedy decode steps, resident and
// streamed at 3·top-k = 12 and E/2 = 8 slots a layer (NVMAI_GPU_SLOTS);
// the replay changes the output (it is applied); and switching it off and
// on between decode steps (a recaptured graph each time) follows the CPU
// engine step for step.
func TestRoutingReplayMatchesCPUEngine(t *testing.T) {
	needGPU(t)
	ids := severalPassPrompt(t)
	for _, bits := range []int{4, 8} {
		t.Run(fmt.Sprintf("%d-bit", bits), func(t *testing.T) {
			dir := install(t, "tiny-moe-fused", bits)
			cpu := loadEngine(t, dir, false)
			router := replayRun(t, cpu, ids, nil, 0)
			gpuRouter := func() bool {
				e := loadGPUWith(t, dir, 0, 0)
				defer e.Close()
				return slices.Equal(replayRun(t, e, ids, nil, 0).logits, router.logits)
			}()
			for _, spec := range []string{"synthetic:agent", "synthetic:diverse"} {
				src := synthSource(t, cpu, spec)
				want := replayRun(t, cpu, ids, src, 64)
				if slices.Equal(want.logits, router.logits) {
					t.Fatalf("%s: the CPU engine's logits are the router's: the replay is not applied", spec)
				}
				for _, slots := range []int{0, 12, 8} {
					compareReplay(t, fmt.Sprintf("tiny-moe %d-bit %s at %d slots", bits, spec, slots), dir, slots, ids, src, want, gpuRouter)
				}
			}
			src := synthSource(t, cpu, "synthetic:diverse")
			short := ids[:40]
			want := switchedRun(t, cpu, short, src)
			for _, slots := range []int{0, 8} {
				e := loadGPUWith(t, dir, slots, 0)
				got := switchedRun(t, e, short, src)
				e.Close()
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("replay switched off at step 4, on at 6, %d slots: step %d's logits differ from the CPU engine's (max %g)", slots, i, cudatest.MaxAbsDiff(got[i], want[i]))
					}
				}
			}
		})
	}
}

// The synthetic 35B-A3B geometry (NVMAI_SYNTH_DIRS, installs of at most 8
// layers; NVMAI_STREAM_BIG=1 takes them all) under synthetic:agent: the
// GPU's logits after prefill passes of 64 tokens and 64 greedy decode
// steps are bitwise the CPU engine's, resident and streamed at 3·top-k
// slots a layer.
func TestRoutingReplaySyntheticMatchesCPUEngine(t *testing.T) {
	needGPU(t)
	t.Setenv("NVMAI_GPU_CHUNK", "64")
	for _, dir := range envDirs(t, "NVMAI_SYNTH_DIRS", "synthetic install") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m := smallSynth(t, dir, "replays")
			ids := synthIDs(100)
			cpu := loadEngine(t, dir, false)
			src := synthSource(t, cpu, "synthetic:agent")
			want := replayRun(t, cpu, ids, src, 64)
			for _, slots := range []int{0, 3 * m.Experts.TopK} {
				compareReplay(t, fmt.Sprintf("%s synthetic:agent at %d slots", filepath.Base(dir), slots), dir, slots, ids, src, want, false)
			}
		})
	}
}
