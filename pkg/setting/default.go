package setting

// DefaultTo sets *v to def when it is unset: zero, or less, which no count
// or duration of a Config means. A Config's defaults are then one line a
// field, in the order they depend on each other.
func DefaultTo[T ~int | ~int64 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
