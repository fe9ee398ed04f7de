// Package devshared holds the host code the GPU engines share (pkg/gpu for
// qwen3.5, pkg/gpu/qwen38gpu for qwen4_exp): sampling on the device, a
// Forward's checks and KV growth, and the weight uploader. Each helper
// enqueues exactly what the engines enqueued before it was shared, in the
// same order, so the engines' results do not depend on which owns it.
package devshared
