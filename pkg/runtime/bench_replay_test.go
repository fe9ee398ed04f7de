package runtime

import (
	"strings"
	"sync"
	"testing"

	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/models/qwen35"
	"github.com/nvmai/nvmai/pkg/routing"
)

// replayingBackend is a fakeBackend that holds its experts and says it
// replays routing (as the GPU engine does): its states record the
// override they are given.
type replayingBackend struct {
	*fakeBackend
	overrides []model.RouteOverride
}

type replayingState struct {
	*fakeState
	b *replayingBackend
}

func (b *replayingBackend) ReplaysRouting() bool { return true }
func (b *replayingBackend) NewState(opt model.StateOptions) (model.State, error) {
	st, err := b.fakeBackend.NewState(opt)
	if err != nil {
		return nil, err
	}
	return &replayingState{fakeState: st.(*fakeState), b: b}, nil
}
func (s *replayingState) SetRouteOverride(o model.RouteOverride) {
	s.b.overrides = append(s.b.overrides, o)
}

var (
	nextReplaying     *replayingBackend
	registerReplaying sync.Once
)

func loadReplaying(t *testing.T, dir string, b *replayingBackend) (*Engine, error) {
	t.Helper()
	registerReplaying.Do(func() {
		model.Register(qwen35.ArchMoE, "fake-replay", model.Entry{HoldsExperts: true, Footprint: qwen35.Footprint,
			Load: func(req model.Request) (model.Model, error) {
				nextReplaying.V = req.Manifest.Geometry.VocabSize
				return nextReplaying, nil
			}})
	})
	nextReplaying = b
	return Load(dir, Options{Threads: 1, Device: "fake-replay"})
}

// An engine that holds its experts replays routing in bench when it says
// it can (ReplaysRouting: the GPU engine): its session's state gets the
// override and the report names the source; one that does not is refused,
// saying which engines replay.
func TestBenchReplayOnAnEngineHoldingItsExperts(t *testing.T) {
	dir := install(t, "tiny-moe-fused", 4)
	var rows int
	rb := &replayingBackend{fakeBackend: &fakeBackend{rows: &rows}}
	e, err := loadReplaying(t, dir, rb)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	geom, _ := e.RoutingGeometry()
	syn, err := routing.NewSynthetic(geom, routing.Spec{Regime: routing.Agent, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	r, err := routingBench(t, e, syn)
	if err != nil {
		t.Fatalf("bench with routing on an engine that replays: %v", err)
	}
	if r.Routing != "synthetic agent seed=3" {
		t.Errorf("routing reported as %q", r.Routing)
	}
	if len(rb.overrides) == 0 || rb.overrides[0] == nil {
		t.Errorf("the session's state got overrides %v, want the synthetic source", rb.overrides)
	}

	holds, err := loadFake(t, dir, &fakeBackend{rows: &rows})
	if err != nil {
		t.Fatal(err)
	}
	defer holds.Close()
	if _, err := routingBench(t, holds, syn); err == nil || !strings.Contains(err.Error(), "need an engine that replays routing: the CPU engine, or the GPU engine") {
		t.Errorf("bench with routing on an engine that does not replay: %v", err)
	}
}
