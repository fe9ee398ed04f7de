package hf

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/safetensors"
)

// checkNGramTensor returns what is wrong with an n-gram table shard's or
// buffer's dtype or shape, or "" (the row count is checkNGram's).
func checkNGramTensor(t *SourceTensor, g *packexperts.Geometry) string {
	q := g.Qwen4Exp
	if t.Role == NGramBuffer {
		want := []int64{int64(q.NGramHeads())}
		if t.Proj == BufMultipliers {
			want = []int64{int64(q.NGramSize)}
		}
		if t.Info.DType != safetensors.I64 || !slices.Equal(t.Info.Shape, want) {
			return fmt.Sprintf("tensor %q: %s %v, want I64 %v", t.Name, t.Info.DType, t.Info.Shape, want)
		}
		return ""
	}
	switch t.Info.DType {
	case safetensors.BF16, safetensors.F16, safetensors.F32:
	default:
		return fmt.Sprintf("tensor %q: dtype %s; the n-gram table must be BF16, F16 or F32", t.Name, t.Info.DType)
	}
	if len(t.Info.Shape) != 2 || t.Info.Shape[1] != int64(q.NGramRowWidth()) || t.Info.Shape[0] <= 0 {
		return fmt.Sprintf("tensor %q: shape %v, want [rows, %d] (ple_embed_dim / n-gram heads)", t.Name, t.Info.Shape, q.NGramRowWidth())
	}
	return ""
}

// checkNGram validates every PLE layer's table against the config (rows,
// sharding, q38 §2.6) and its I64 buffers against the recomputed constants
// (q38 §3.4), and records where each shard's rows go.
func (s *Snapshot) checkNGram() error {
	if s.Architecture != ArchQwen4Exp {
		return nil
	}
	s.NGramFirstRow = map[string]int64{}
	var problems []string
	for k, layer := range s.Geometry.Qwen4Exp.PLELayers {
		want, err := packexperts.PlanNGram(&s.Geometry, k)
		if err != nil {
			return fmt.Errorf("%s: config.json: PLE layer %d: %v", s.path(ConfigFile), layer, err)
		}
		tables, bufs := s.ngramTensors(layer)
		problems = append(problems, s.checkShards(&want, tables)...)
		msgs, err := s.checkBuffers(&want, bufs)
		if err != nil {
			return err
		}
		problems = append(problems, msgs...)
		s.NGram = append(s.NGram, want)
	}
	if len(problems) > 0 {
		return listError(fmt.Sprintf("%s: %d problems with the n-gram tables (config.json's PLE fields decide their rows and sharding)", s.Dir, len(problems)), problems)
	}
	return nil
}

func (s *Snapshot) ngramTensors(layer int) (tables []*SourceTensor, bufs map[string]*SourceTensor) {
	bufs = map[string]*SourceTensor{}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		switch {
		case t.Layer != layer:
		case t.Role == NGramTable:
			tables = append(tables, t)
		case t.Role == NGramBuffer:
			bufs[t.Proj] = t
		}
	}
	slices.SortFunc(tables, func(a, b *SourceTensor) int { return a.NGramShard - b.NGramShard })
	return tables, bufs
}

// checkShards accepts one unsharded table of want.Rows rows, or exactly the
// shards 5.17 writes for split_ngram_parts: ⌈rows/parts⌉ rows each, the last
// the remainder.
func (s *Snapshot) checkShards(want *packexperts.NGram, tables []*SourceTensor) []string {
	name := func(shard int) string {
		if shard < 0 {
			return fmt.Sprintf("model.layers.%d.%sngram_embedding.weight", want.Layer, ngramPrefix)
		}
		return fmt.Sprintf("model.layers.%d.%sngram_embedding.shard_%d.weight", want.Layer, ngramPrefix, shard)
	}
	parts := int64(s.Geometry.Qwen4Exp.SplitNGramParts)
	per := (want.Rows + parts - 1) / parts
	n := int((want.Rows + per - 1) / per)
	if len(tables) == 0 {
		return []string{fmt.Sprintf("layer %d: no n-gram table: want %s … %s (split_ngram_parts %d) or %s", want.Layer, name(0), name(n-1), parts, name(-1))}
	}
	if tables[0].NGramShard < 0 {
		if len(tables) > 1 {
			return []string{fmt.Sprintf("tensor %q and %d shards both hold layer %d's n-gram rows; keep one form", tables[0].Name, len(tables)-1, want.Layer)}
		}
		return s.checkShardRows(tables[0], 0, want.Rows)
	}
	var problems []string
	next := 0
	for _, t := range tables {
		switch {
		case t.NGramShard >= n:
			problems = append(problems, fmt.Sprintf("tensor %q: shard %d, but %d rows in split_ngram_parts %d make %d shards (%s … %s); wrong shard count", t.Name, t.NGramShard, want.Rows, parts, n, name(0), name(n-1)))
			continue
		case t.NGramShard > next:
			for m := next; m < t.NGramShard; m++ {
				problems = append(problems, fmt.Sprintf("%s is missing: a gap in layer %d's n-gram shards (rows %d…%d)", name(m), want.Layer, int64(m)*per, min(int64(m+1)*per, want.Rows)-1))
			}
		}
		next = t.NGramShard + 1
		first := int64(t.NGramShard) * per
		problems = append(problems, s.checkShardRows(t, first, min(per, want.Rows-first))...)
	}
	for m := next; m < n; m++ {
		problems = append(problems, fmt.Sprintf("%s is missing: layer %d's n-gram table needs %d shards of %d rows (split_ngram_parts %d)", name(m), want.Layer, n, per, parts))
	}
	return problems
}

func (s *Snapshot) checkShardRows(t *SourceTensor, first, rows int64) []string {
	if t.Info.Shape[0] != rows {
		return []string{fmt.Sprintf("tensor %q: %d rows, want %d (rows %d…%d of the %s-derived table)", t.Name, t.Info.Shape[0], rows, first, first+rows-1, ConfigFile)}
	}
	s.NGramFirstRow[t.Name] = first
	return nil
}

// checkBuffers reads the three I64 buffers and compares them with the
// recomputed constants, which the install carries.
func (s *Snapshot) checkBuffers(want *packexperts.NGram, bufs map[string]*SourceTensor) ([]string, error) {
	var problems []string
	for _, b := range []struct {
		name string
		want []int64
	}{{BufMultipliers, want.Multipliers}, {BufVocabSizes, want.VocabSizes}, {BufOffsets, want.Offsets}} {
		t := bufs[b.name]
		if t == nil {
			problems = append(problems, fmt.Sprintf("model.layers.%d.%s%s is missing", want.Layer, ngramPrefix, b.name))
			continue
		}
		got, err := s.readInt64s(t)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(got, b.want) {
			problems = append(problems, fmt.Sprintf("tensor %q holds %v, but config.json (vocab_size, seed, ngram_vocab_size_base, …) gives %v; the checkpoint and its config disagree", t.Name, got, b.want))
		}
	}
	return problems, nil
}

func (s *Snapshot) readInt64s(t *SourceTensor) ([]int64, error) {
	f, err := s.OpenShard(t.Shard)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw := make([]byte, t.Info.Size())
	if err := f.ReadTensor(t.Info, raw); err != nil {
		return nil, err
	}
	out := make([]int64, len(raw)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out, nil
}
