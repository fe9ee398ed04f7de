package cuda

import "unsafe"

// Bytes views a slice of plain numbers as its bytes (no copy), for copies to
// and from the device.
func Bytes[T ~int32 | ~uint32 | ~float32 | ~int8 | ~uint8 | ~uint16 | ~int64 | ~uint64](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// AllocCopy allocates device memory holding src.
func (c *Ctx) AllocCopy(src []byte) (DevicePtr, error) {
	p, err := c.Alloc(uint64(len(src)))
	if err != nil {
		return 0, err
	}
	if err := c.HtoD(p, src); err != nil {
		c.Free(p)
		return 0, err
	}
	return p, nil
}
