package typemap

// CanWiden reports whether a column of type from may be changed to type to
// without losing any value: BYTE→SHORT→INT→LONG, FLOAT→DOUBLE, and DECIMAL
// growing its integer and fraction digits. Integer → floating point is refused
// (a BIGINT does not fit a DOUBLE's mantissa). With Iceberg reads on, only the
// changes Iceberg V2 allows remain: INT→LONG, FLOAT→DOUBLE, and DECIMAL
// precision increases at the same scale.
func CanWiden(from, to Type, icebergReads bool) bool {
	if from.Equal(to) {
		return false
	}
	if icebergReads {
		switch {
		case from.Kind == Int && to.Kind == Long:
			return true
		case from.Kind == Float && to.Kind == Double:
			return true
		case from.Kind == Decimal && to.Kind == Decimal:
			return to.Scale == from.Scale && to.Precision > from.Precision
		}
		return false
	}
	if rank, ok := integerRank[from.Kind]; ok {
		toRank, ok := integerRank[to.Kind]
		return ok && toRank > rank
	}
	switch {
	case from.Kind == Float && to.Kind == Double:
		return true
	case from.Kind == Decimal && to.Kind == Decimal:
		return to.Scale >= from.Scale && to.Precision-to.Scale >= from.Precision-from.Scale
	}
	return false
}

var integerRank = map[Kind]int{Byte: 1, Short: 2, Int: 3, Long: 4}
