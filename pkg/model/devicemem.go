package model

// ExpertModeGPUPinned is the expert-cache Mode (expertcache.Stats.Mode) of
// an engine whose cache is VRAM slots filled from page-locked host RAM over
// PCIe: its BytesRead are bytes copied over the bus, not read from disk.
const ExpertModeGPUPinned = "gpu-pinned"

// DeviceMemory is a device engine's memory: the whole device as its driver
// reports it (other processes included), and the engine's own share as its
// load planned it.
type DeviceMemory struct {
	Used, Total int64 // the device's total less its free memory, and its total
	// The plan's split: the weights that are not routed experts, one
	// sequence's state (KV cache, recurrent state, scratch) at the plan's
	// context, the routed experts held in device memory (the slot pool when
	// they stream, every expert when resident), and prefill's staging
	// buffer (streamed only).
	Trunk, State, Experts, Staging int64
	// Streamed: the experts stream into Experts' slots from host RAM.
	Streamed bool
}

// DeviceMemoryReporter is a Model that can report its device memory (the
// GPU engine). It is read on demand, for a live view: never per step.
type DeviceMemoryReporter interface {
	DeviceMemory() (DeviceMemory, error)
}
