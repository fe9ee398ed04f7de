// Package expertstream holds what the GPU engines (pkg/gpu for qwen3.5,
// pkg/gpu/qwen38gpu for qwen4_exp) share to stream routed experts into
// VRAM (docs/gpu.md, "Streaming experts into VRAM"): the plan that decides
// resident or streamed and the slots a layer, and the device-planned
// streamer: every expert of a streamed layer in page-locked host memory
// mapped into the device, a VRAM slot pool and its table, the decode
// step's resolve and fill, the prefill pass's staging, and the counters;
// and the host-planned tier (host.go) for RAM that cannot page-lock every
// expert: a RAM tier over pkg/expertcache backed by the disk, the slot
// table kept on the host (SlotRef), decode resolved and prefill staged by
// the host between layers.
// Each piece enqueues exactly what pkg/gpu enqueued before it was shared,
// so the engines' bytes do not depend on which owns it.
package expertstream
