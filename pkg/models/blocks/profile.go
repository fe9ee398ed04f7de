package blocks

import (
	"github.com/nvmai/nvmai/pkg/kernels"
	"github.com/nvmai/nvmai/pkg/model"
)

// The decode-step profile is part of the engine surface (model.Profiler),
// so it lives in package model; these names keep blocks' API.
type (
	StepPhase   = model.StepPhase
	StepProfile = model.StepProfile
)

// The phases of a decode step (model.StepPhase).
const (
	PhaseNorms           = model.PhaseNorms
	PhaseGDNProjections  = model.PhaseGDNProjections
	PhaseGDNConv         = model.PhaseGDNConv
	PhaseGDNHeads        = model.PhaseGDNHeads
	PhaseGDNOut          = model.PhaseGDNOut
	PhaseAttnProjections = model.PhaseAttnProjections
	PhaseAttnHeads       = model.PhaseAttnHeads
	PhaseAttnOut         = model.PhaseAttnOut
	PhaseRouter          = model.PhaseRouter
	PhaseRouting         = model.PhaseRouting
	PhasePrefetch        = model.PhasePrefetch
	PhaseExpertWait      = model.PhaseExpertWait
	PhaseExpertGateUp    = model.PhaseExpertGateUp
	PhaseExpertDown      = model.PhaseExpertDown
	PhaseSharedDown      = model.PhaseSharedDown
	PhaseCombine         = model.PhaseCombine
	PhaseLMHead          = model.PhaseLMHead
	NumStepPhases        = model.NumStepPhases
)

// MatrixBytes is what a product reads of its matrices.
func MatrixBytes(ms ...*kernels.Matrix) int64 { return model.MatrixBytes(ms...) }
