// Package limits holds the size ceilings that more than one nvmai package must
// agree on. A reader and the writer of the same file import the same constant,
// so a file one side accepts is never refused by the other. Each ceiling cites
// where its number comes from; none is a convenient round literal.
package limits

const (
	// SafetensorsHeader is the largest header (JSON) length the safetensors
	// format accepts: the reference implementation refuses N > 100,000,000
	// (safetensors/src/tensor.rs, MAX_HEADER_SIZE).
	SafetensorsHeader = 100_000_000

	// SafetensorsIndex bounds model.safetensors.index.json. The format sets no
	// ceiling of its own; every entry of its weight_map names a tensor that must
	// also appear in some shard header, and one shard header may be as large as
	// SafetensorsHeader, so an index larger than that cannot describe a model a
	// single header could not. Real indexes are ~10 MB; 28 MB must pass.
	SafetensorsIndex = SafetensorsHeader

	// SnapshotJSON bounds config.json, generation_config.json and
	// tokenizer_config.json. They carry no tensor data; tokenizer_config.json
	// embeds the chat template, which is the largest of them in practice
	// (tens of KiB). We allow the same ceiling as a safetensors header, the
	// largest JSON document the ecosystem defines a limit for.
	SnapshotJSON = SafetensorsHeader

	// TokenizerJSON bounds tokenizer.json: a 248k-entry vocabulary and its
	// merges take ~12 MB; the ceiling is the safetensors header ceiling for the
	// same reason as SnapshotJSON.
	TokenizerJSON = SafetensorsHeader

	// Manifest bounds an nvmai manifest.json. A manifest holds one entry per
	// tensor of the source plus the source file hashes; it is derived from
	// the source headers, so it can never need more room than the source index.
	Manifest = SafetensorsIndex

	// Receipt bounds verified-install.json: one line per payload file, far
	// smaller than the manifest that lists the same files.
	Receipt = Manifest

	// DirectIOAlign is the alignment of expert strides, expert file offsets and
	// slot buffers, so experts can be read with O_DIRECT on 4Kn devices
	// (statx STATX_DIOALIGN reports 512 here; 4096 is safe everywhere).
	DirectIOAlign = 4096

	// QuantGroupSize is the MLX affine group size nvmai writes and reads.
	QuantGroupSize = 64

	// MaxTensorRank bounds the number of dimensions of any tensor we accept;
	// safetensors itself has no limit, the models we run use at most 5
	// (the vision patch embedding).
	MaxTensorRank = 8
)
