// Package expertcache is the bounded expert slot cache: it serves the routed
// experts of an nvmai install from a fixed number of slots per layer, so the
// memory experts take is exactly the budget the user sets, not whatever the
// kernel's page cache decides to keep.
//
// Each MoE layer owns `slots` buffers of `stride` bytes (one expert record
// each), carved out of one anonymous mapping per layer: off the Go heap,
// page-aligned, so O_DIRECT can read straight into them. A request for a
// layer's experts pins the resident ones, picks victims among the unpinned
// slots by the eviction Policy, and hands every miss of the layer to a pool
// of reader goroutines at once (NVMAI's "deferred batch", nvmai-reference
// §6.2–6.4). Memory beyond the slots is small: three kernels.Matrix views
// per slot and a few bytes of bookkeeping per expert.
//
// Reads bypass the page cache by default (IOBounded): O_DIRECT, else
// preadv2 with RWF_DONTCACHE (Linux ≥ 6.14 and file system support), else
// pread followed by POSIX_FADV_DONTNEED; the first that works on the
// install's file system wins (see boundedOrder for the measurements behind
// the order). IOBuffered uses plain pread and lets the page cache grow; it
// can be faster when RAM is plentiful but its footprint is undeclared
// (NVMAI_BOUNDED_IO=0).
//
// A Cache serves one caller at a time (the model runs its layers in order);
// the reader pool inside it is concurrent. Release functions may be called
// from any goroutine.
package expertcache
