// Package qwen38gpu is the GPU engine of Qwen3.8-Flash-Next (qwen4_exp,
// docs/qwen38-architecture.md): the forward pass of package qwen38 with
// every weight, the routed experts included, resident in VRAM. It reuses
// pkg/gpu/gpukernels' launchers where the math is qwen35's (products,
// embedding, the GDN conv and delta rule, attention, routing, combine,
// argmax, sampling) and loads its own kernels (kernels.cu: the four-stream
// gated residual, the PLE layer, the sigmoid-gated GDN output, the QSA
// indexer) as a second NVRTC module. The n-gram table never enters VRAM:
// each pass's rows are read on the host by the CPU engine's bounded reader
// (runtime.OpenNgramTables) and copied to the device ahead of the PLE layer.
package qwen38gpu
