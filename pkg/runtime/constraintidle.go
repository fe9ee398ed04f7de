package runtime

// IdleConstraint is a Constraint that can tell, before a step, that its
// Mask would allow every token (pkg/toolconstrain in free text, before
// any tool call opens). The step then samples as it would without a
// constraint (on the device, where a constrained step copies the row
// here), and Advance still sees the token picked.
type IdleConstraint interface {
	Constraint
	Idle() bool
}

// constrained reports whether this step must mask the row.
func constrained(c Constraint) bool {
	if c == nil {
		return false
	}
	ic, ok := c.(IdleConstraint)
	return !ok || !ic.Idle()
}
