package main

import (
	"fmt"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// deviceStateRoom is a device engine whose sequence states live in device
// memory (gpu.Backend): per is one state at the plan's context, room the
// device memory left for states.
type deviceStateRoom interface {
	SequenceRoom() (per, room int64, err error)
}

// defaultDeviceParallel is serve's --parallel on a device engine when none
// is given, with the ready line's note (deviceParallelDefault).
func defaultDeviceParallel(e *runtime.Engine, device string) (int, string) {
	r, _ := e.Model().(deviceStateRoom)
	return deviceParallelDefault(device, e.CanBatch(), r)
}

// deviceParallelDefault is 1 where the engine has no batched step or
// states room r; otherwise the most states, up to defaultParallelMost,
// that fit the device's room, at least 1. (The GPU's batched step was
// validated on an H100 in session 19: each stream bitwise alone.)
func deviceParallelDefault(device string, canBatch bool, r deviceStateRoom) (int, string) {
	if r == nil || !canBatch {
		return 1, "default: the " + device + " engine has no batched step yet"
	}
	per, room, err := r.SequenceRoom()
	if err != nil {
		return 1, fmt.Sprintf("default: the device's free memory is unknown (%v); --parallel N runs N at once", err)
	}
	return deviceStatesIn(per, room)
}

// deviceStatesIn is how many states of per bytes, up to
// defaultParallelMost and at least 1, fit room bytes of device memory,
// with the note saying so.
func deviceStatesIn(per, room int64) (int, string) {
	n := defaultParallelMost
	if per > 0 {
		n = int(min(int64(defaultParallelMost), room/per))
	}
	if n < 1 {
		return 1, fmt.Sprintf("default: one device state of %s, %s of device memory free beside the rest", expertcache.FormatSize(per), expertcache.FormatSize(room))
	}
	note := fmt.Sprintf("default: %s of %s %s in %s of device memory free", plural(n, "state"), expertcache.FormatSize(per), map[bool]string{true: "fits", false: "fit"}[n == 1], expertcache.FormatSize(room))
	if n < defaultParallelMost {
		note += fmt.Sprintf("; %d need %s: lower --max-context or --vram-budget for more", defaultParallelMost, expertcache.FormatSize(int64(defaultParallelMost)*per))
	}
	return n, note
}

// deviceParallelFits refuses n device states that do not fit the device's
// room (an engine that cannot tell passes).
func deviceParallelFits(e *runtime.Engine, n int) error {
	r, ok := e.Model().(deviceStateRoom)
	if !ok {
		return nil
	}
	per, room, err := r.SequenceRoom()
	if err != nil || int64(n)*per <= room {
		return nil
	}
	return cliutil.Usagef("--parallel %d holds %d sequence states of %s each in device memory (at the plan's context): %s, more than the %s free beside the model; lower --parallel, --max-context or --vram-budget, or pass --force",
		n, n, expertcache.FormatSize(per), expertcache.FormatSize(int64(n)*per), expertcache.FormatSize(room))
}
