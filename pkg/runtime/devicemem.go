package runtime

import "github.com/nvmai/nvmai/pkg/model"

// DeviceMemory reports the device engine's memory (model.DeviceMemory): the
// device's used and total, and the plan's split. ok is false on the CPU
// engine, or when the device cannot tell. One device read: call it on
// demand (a live view), never per step.
func (e *Engine) DeviceMemory() (m model.DeviceMemory, ok bool) {
	r, isReporter := e.model.(model.DeviceMemoryReporter)
	if !isReporter {
		return model.DeviceMemory{}, false
	}
	m, err := r.DeviceMemory()
	return m, err == nil
}
