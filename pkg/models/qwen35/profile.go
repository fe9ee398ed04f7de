package qwen35

import "github.com/nvmai/nvmai/pkg/models/blocks"

// The decode-step profile lives in package blocks, shared by every
// architecture; these names keep qwen35's API.
type (
	StepPhase   = blocks.StepPhase
	StepProfile = blocks.StepProfile
)

// The phases of a decode step (blocks.StepPhase).
const (
	PhaseNorms           = blocks.PhaseNorms
	PhaseGDNProjections  = blocks.PhaseGDNProjections
	PhaseGDNConv         = blocks.PhaseGDNConv
	PhaseGDNHeads        = blocks.PhaseGDNHeads
	PhaseGDNOut          = blocks.PhaseGDNOut
	PhaseAttnProjections = blocks.PhaseAttnProjections
	PhaseAttnHeads       = blocks.PhaseAttnHeads
	PhaseAttnOut         = blocks.PhaseAttnOut
	PhaseRouter          = blocks.PhaseRouter
	PhaseRouting         = blocks.PhaseRouting
	PhasePrefetch        = blocks.PhasePrefetch
	PhaseExpertWait      = blocks.PhaseExpertWait
	PhaseExpertGateUp    = blocks.PhaseExpertGateUp
	PhaseExpertDown      = blocks.PhaseExpertDown
	PhaseSharedDown      = blocks.PhaseSharedDown
	PhaseCombine         = blocks.PhaseCombine
	PhaseLMHead          = blocks.PhaseLMHead
	NumStepPhases        = blocks.NumStepPhases
)

// SetStepProfile makes the state's decode steps add to p (nil stops it).
func (s *State) SetStepProfile(p *StepProfile) { s.profile = p }
