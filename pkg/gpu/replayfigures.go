package gpu

import (
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
)

// AddReplayFigures adds to info, when m (this engine's Backend) streams its
// experts and the bench replayed src, the VRAM hit rate beside a simulated
// per-layer LRU's on the positions the runs decoded and, device-planned,
// the copy wait measured again under src on the first run's positions: its
// prompt, then up to 64 of its steps (the capture step and the timed
// ones), so a trace that covered the run covers these. nvmai-run bench
// calls it through an interface (commands import this package blank).
func (info *BenchInfo) AddReplayFigures(m model.Model, src routing.Source, desc string, geom routing.Geometry, runs []routing.BenchRun) error {
	b, ok := m.(*Backend)
	if src == nil || !ok || !b.StreamsExperts() || info.Plan == nil || len(runs) == 0 {
		return nil
	}
	h, err := routing.ReplayHitsOf(src, geom, runs, info.Plan.Slots)
	if err != nil {
		return err
	}
	info.ReplayHits = h
	run := runs[0]
	if steps := min(run.Generated-2, 64); steps >= 2 && b.CopyWaitMeasurable() {
		cw, err := b.MeasureCopyWait(src, desc, run.PromptTokens, steps)
		if err != nil {
			return err
		}
		info.CopyWait = &cw
	}
	return nil
}
