package safetensors

import (
	"fmt"
	"strings"
)

// DType is a safetensors element type, spelled as in the header ("BF16").
type DType string

// Element types nvmai reads and writes.
const (
	BF16 DType = "BF16"
	F16  DType = "F16"
	F32  DType = "F32"
	F64  DType = "F64"
	I8   DType = "I8"
	U8   DType = "U8"
	I16  DType = "I16"
	U16  DType = "U16"
	I32  DType = "I32"
	U32  DType = "U32"
	I64  DType = "I64"
	U64  DType = "U64"
	BOOL DType = "BOOL"
)

var dtypeSizes = map[DType]int{
	BF16: 2, F16: 2, F32: 4, F64: 8,
	I8: 1, U8: 1, I16: 2, U16: 2, I32: 4, U32: 4, I64: 8, U64: 8,
	BOOL: 1,
}

// Size is the width of one element in bytes, or 0 for a dtype nvmai does not
// support.
func (d DType) Size() int { return dtypeSizes[d] }

// check explains why d cannot be used. The sub-byte and 8-bit float types are
// real safetensors dtypes that recent checkpoints ship, so they get a message
// that says what to do rather than "unknown".
func (d DType) check() error {
	if d.Size() > 0 {
		return nil
	}
	s := string(d)
	switch {
	case strings.HasPrefix(s, "F8"):
		return fmt.Errorf("dtype %s: 8-bit float tensors are not supported; convert the checkpoint to bf16 first", s)
	case s == "F4" || strings.HasPrefix(s, "F6"):
		return fmt.Errorf("dtype %s: sub-byte float tensors are not supported; convert the checkpoint to bf16 first", s)
	}
	return fmt.Errorf("unknown dtype %q (supported: BF16 F16 F32 F64 I8 U8 I16 U16 I32 U32 I64 U64 BOOL)", s)
}
