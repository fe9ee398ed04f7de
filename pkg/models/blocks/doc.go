// Package blocks holds the building blocks the Qwen decoders share (qwen35
// and qwen38): the norms and scalar functions, RoPE, the attention
// softmax, the Gated DeltaNet conv, recurrence and gated norm, the MoE
// router and expert runner, the pool-split products and the decode-step
// profile; and what every architecture's New and Forward do alike: the
// checked tensor Loader, the Trunk geometry checks, CheckForward and the
// split of a Forward into passes (Chunks). Every function keeps the determinism contract of the models that
// use it: reductions in a fixed order, work split over the pool's threads
// only by whole rows, heads or channels, so results never depend on the
// thread count or on how a prompt is chunked.
package blocks
