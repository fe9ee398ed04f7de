package cuda

import "fmt"

// Marks are points on the side stream that the stream can wait for one by
// one, where Join waits for all of it: work for several later consumers
// queues on the side stream, each consumer waiting only for its own part
// (the streamed experts' read-ahead several layers early, pkg/gpu). Each
// mark is its own event, so recording mark j+1 does not move the point a
// wait for mark j sees, inside a graph capture too (a wait takes the
// event's last record).

// SideMarks makes at least n marks (SideStream first); call it outside a
// graph capture (at load). The device destroys them when it closes.
func (c *Ctx) SideMarks(n int) error {
	dev := c.dev
	if dev.side == 0 {
		return fmt.Errorf("cuda: SideMarks without a side stream (SideStream)")
	}
	const disableTiming = 2
	for len(dev.marks) < n {
		var e handle
		if err := dev.d.check("cuEventCreate(mark)", dev.d.cuEventCreate(&e, disableTiming)); err != nil {
			return err
		}
		dev.marks = append(dev.marks, e)
	}
	return nil
}

// MarkSide records mark i after everything enqueued on the side stream so
// far.
func (c *Ctx) MarkSide(i int) error {
	dev := c.dev
	if i < 0 || i >= len(dev.marks) {
		return fmt.Errorf("cuda: side mark %d of %d (SideMarks)", i, len(dev.marks))
	}
	return dev.d.check("cuEventRecord(mark)", dev.d.cuEventRecord(dev.marks[i], dev.side))
}

// WaitMark makes the stream's next work wait for what the side stream held
// when mark i was last recorded, as Join does for all of it (the next
// launch on the stream takes no PDL). Inside a capture, the side work
// after the last waited mark must still be joined before EndCapture.
func (c *Ctx) WaitMark(i int) error {
	dev := c.dev
	if i < 0 || i >= len(dev.marks) {
		return fmt.Errorf("cuda: side mark %d of %d (SideMarks)", i, len(dev.marks))
	}
	if err := dev.d.check("cuStreamWaitEvent(mark)", dev.d.cuStreamWaitEvent(dev.stream, dev.marks[i], 0)); err != nil {
		return err
	}
	dev.plainNext = true
	return nil
}
