package convert

import (
	"fmt"
	"sort"
	"strings"
)

// Parts of an expert the accumulator tracks.
const (
	partGate uint8 = 1 << iota
	partUp
	partDown
	partAll = partGate | partUp | partDown
)

var partBits = map[string]uint8{"gate": partGate, "up": partUp, "down": partDown, "gate_up": partGate | partUp}

// expertAccumulator records which parts of which expert have been filed.
// The expert axis of every layer is allocated up front and each expert is
// filed at its own index, so arrival order (string-sorted indexes, experts
// split across shards) cannot move an expert; a second arrival is an error,
// never an overwrite.
type expertAccumulator struct {
	numExperts int
	layers     map[int][]uint8
}

func newExpertAccumulator(moeLayers []int, numExperts int) *expertAccumulator {
	a := &expertAccumulator{numExperts: numExperts, layers: map[int][]uint8{}}
	for _, l := range moeLayers {
		a.layers[l] = make([]uint8, numExperts)
	}
	return a
}

// file marks proj ("gate", "up", "down" or "gate_up") of expert e of layer
// as present. tensor names the source tensor for error messages.
func (a *expertAccumulator) file(layer, e int, proj, tensor string) error {
	slots, ok := a.layers[layer]
	if !ok {
		return fmt.Errorf("tensor %s: layer %d has no routed experts", tensor, layer)
	}
	if e < 0 || e >= a.numExperts {
		return fmt.Errorf("tensor %s: expert %d is out of range (num_experts is %d)", tensor, e, a.numExperts)
	}
	bits, ok := partBits[proj]
	if !ok {
		return fmt.Errorf("tensor %s: unknown expert projection %q", tensor, proj)
	}
	if slots[e]&bits != 0 {
		return fmt.Errorf("tensor %s: duplicate expert: layer %d expert %d %s was already filed (each expert must appear exactly once across all shards)", tensor, layer, e, proj)
	}
	slots[e] |= bits
	return nil
}

// complete returns an error listing, per layer, every expert that is not
// fully present.
func (a *expertAccumulator) complete() error {
	layers := make([]int, 0, len(a.layers))
	for l := range a.layers {
		layers = append(layers, l)
	}
	sort.Ints(layers)
	var msgs []string
	for _, l := range layers {
		var missing []string
		for e, got := range a.layers[l] {
			if got != partAll {
				missing = append(missing, fmt.Sprintf("%d(%s)", e, missingParts(got)))
			}
		}
		if len(missing) > 0 {
			if len(missing) > 16 {
				missing = append(missing[:16], fmt.Sprintf("… %d more", len(missing)-16))
			}
			msgs = append(msgs, fmt.Sprintf("layer %d: experts %s", l, strings.Join(missing, ", ")))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("missing experts (the snapshot is incomplete; re-download it):\n  %s", strings.Join(msgs, "\n  "))
	}
	return nil
}

func missingParts(got uint8) string {
	var s []string
	for _, n := range []string{"gate", "up", "down"} {
		if got&partBits[n] == 0 {
			s = append(s, n)
		}
	}
	return strings.Join(s, "+")
}
