package gpu

import (
	"errors"
	"fmt"

	"github.com/nvmai/nvmai/pkg/gpu/cuda"
	"github.com/nvmai/nvmai/pkg/gpu/gpukernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// CopyWait is how long a streamed decode step waits for its copies from
// pinned RAM: the same decode steps timed twice from the same slot tables,
// once as they run and once with slot_fill and slot_fill_ahead copying
// nothing (the skip word they read), every other launch (routing, the
// slot bookkeeping, the guesses, the products) unchanged. The difference
// is the copies' time the step did not hide behind compute. The second
// run's output is meaningless (slots keep stale bytes); it is a throwaway
// sequence's, and afterwards the slot tables are emptied (the next steps
// copy what they need again: a cold cache, never a wrong byte) and the
// counters are put back as they were, so nothing a user sees afterwards
// depends on the measurement.
type CopyWait struct {
	Routing    string  `json:"routing"`                // "router", or the replayed routing's source
	Steps      int     `json:"steps"`                  // decode steps timed in each run
	Prompt     int     `json:"prompt_tokens"`          // before them
	StreamedMs float64 `json:"streamed_step_ms"`       // a step as it runs, device time
	NoCopyMs   float64 `json:"no_copy_step_ms"`        // the same steps, copies skipped
	WaitMs     float64 `json:"copy_wait_ms_per_token"` // StreamedMs − NoCopyMs
}

// CopyWaitMeasurable reports whether MeasureCopyWait applies: the experts
// stream device-planned. A host-planned plan has no decode graph to time
// twice; its tiers report the host's waits instead (BenchInfo.Tiers).
func (b *Backend) CopyWaitMeasurable() bool {
	return b.Model.stream != nil && b.Model.stream.host == nil
}

// MeasureCopyWait measures CopyWait on fresh sequences of prompt tokens
// (ids 1 … 7 repeated, as Measure's) and then steps decode steps, routed
// by o (nil: the router), which desc names. Only for streamed experts.
func (b *Backend) MeasureCopyWait(o model.RouteOverride, desc string, prompt, steps int) (CopyWait, error) {
	cw := CopyWait{Routing: desc, Steps: steps, Prompt: prompt}
	var err error
	cw.StreamedMs, cw.NoCopyMs, err = b.Model.copyWait(o, prompt, steps)
	cw.WaitMs = cw.StreamedMs - cw.NoCopyMs
	return cw, err
}

// copyWait times steps decode steps after a prompt with the copies on,
// then puts the slot tables back as they were before and times the same
// steps with them skipped (see CopyWait).
func (m *Model) copyWait(o model.RouteOverride, prompt, steps int) (streamed, noCopy float64, err error) {
	x := m.stream
	if x == nil {
		return 0, 0, errors.New("gpu: the experts are resident: no copies to wait for")
	}
	if steps < 2 || prompt < 1 {
		return 0, 0, fmt.Errorf("gpu: copy wait over %d steps after %d prompt tokens: want at least 2 and 1", steps, prompt)
	}
	g := m.geom
	words := gpukernels.SlotTableWords(g.E, x.slots, g.k)
	tabs := make([][]int32, len(x.layers))
	stats := make([]uint64, gpukernels.SlotStatsWords*len(x.layers))
	if err := m.dev.Do(func(c *cuda.Ctx) error {
		for i, sl := range x.layers {
			tabs[i] = make([]int32, words)
			if err := c.DtoH(cuda.Bytes(tabs[i]), sl.tab); err != nil {
				return err
			}
		}
		return c.DtoH(cuda.Bytes(stats), x.stats)
	}); err != nil {
		return 0, 0, err
	}
	defer func() {
		rerr := m.dev.Do(func(c *cuda.Ctx) error {
			if err := c.Memset32(x.noCopy, 0, 1); err != nil {
				return err
			}
			for _, sl := range x.layers { // empty, as at load: the pool no longer holds what the tables name
				if err := c.Memset32(sl.tab, 0xffffffff, uint64(g.E+x.slots)); err != nil {
					return err
				}
				if err := c.Memset32(sl.tab+cuda.DevicePtr(4*(g.E+x.slots)), 0, uint64(words-g.E-x.slots)); err != nil {
					return err
				}
			}
			if err := c.HtoD(x.stats, cuda.Bytes(stats)); err != nil {
				return err
			}
			return c.Sync()
		})
		if err == nil && rerr != nil {
			err = fmt.Errorf("gpu: emptying the slot tables after the copy-wait measurement: %w", rerr)
		}
	}()
	if streamed, err = m.timeDecode(o, prompt, steps, false); err != nil {
		return 0, 0, err
	}
	if err := m.dev.Do(func(c *cuda.Ctx) error {
		for i, sl := range x.layers {
			if err := c.HtoD(sl.tab, cuda.Bytes(tabs[i])); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	noCopy, err = m.timeDecode(o, prompt, steps, true)
	return streamed, noCopy, err
}

// timeDecode runs a fresh sequence's prompt, then times steps decode steps
// (each staged and replayed as a session's Forward, so a replayed routing
// advances), the copies skipped when skip is set: ms per step.
func (m *Model) timeDecode(o model.RouteOverride, prompt, steps int, skip bool) (float64, error) {
	st, err := m.NewState(StateOptions{KVInitial: prompt + steps + 8, KVBits: m.kvBits()})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	if o != nil {
		st.SetRouteOverride(o)
	}
	ids := make([]int, prompt)
	for i := range ids {
		ids[i] = 1 + i%7
	}
	if err := st.Forward(ids); err != nil {
		return 0, err
	}
	if skip {
		if err := m.dev.Do(func(c *cuda.Ctx) error { return c.Memset32(m.stream.noCopy, 1, 1) }); err != nil {
			return 0, err
		}
	}
	if err := st.Forward([]int{1}); err != nil { // captures the graph
		return 0, err
	}
	var ms float64
	err = m.dev.Do(func(c *cuda.Ctx) (err error) {
		ms, err = timeIt(c, steps, func() error { return st.chunk(c, []int{1}) })
		return err
	})
	return ms, err
}
