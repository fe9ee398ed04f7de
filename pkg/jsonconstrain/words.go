package jsonconstrain

// Words is the mask as a bitset: bit id%64 of word id/64 is set when id is
// allowed. It is the mask's own storage, valid until the next Allowed into
// it, so that a caller combining this mask with others of its own (the tool
// call constraint of pkg/toolconstrain) needs no copy of 248k bits.
func (mk *Mask) Words() []uint64 { return mk.bits }
