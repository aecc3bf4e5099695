package lintrule

import (
	"fmt"
	"time"
)

// DurationAtLeast is the lint rule of a duration field with a lower bound
// lo; why says where the bound comes from, for the message.
func DurationAtLeast(field string, lo time.Duration, why string) string {
	return fmt.Sprintf(`root = if this.type() == "string" && this.parse_duration().catch(-1) < %d { [ "field %s: must be a duration of at least %s (%s), got " + this.quote() ] } else { [] }`,
		lo.Nanoseconds(), field, lo, why)
}
