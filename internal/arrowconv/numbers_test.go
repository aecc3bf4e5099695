package arrowconv

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendDecimal(t *testing.T) {
	tests := []struct {
		in      string
		lenient bool
		p, s    int
		want    string
		err     string
	}{
		{"0", false, 5, 2, "0.00", ""},
		{"-0.0", false, 5, 2, "0.00", ""},
		{"1", false, 1, 0, "1", ""},
		{"0.05", false, 2, 2, "0.05", ""},
		{"-0.05", false, 2, 2, "-0.05", ""},
		{"123.4", false, 5, 2, "123.40", ""},
		{"1.2e-1", false, 3, 2, "0.12", ""},
		{"1e2", false, 3, 0, "100", ""},
		{"1e3", false, 3, 0, "", "needs 4 integer digits"},
		{"100.00000", false, 5, 2, "100.00", ""},
		{"1.001", false, 5, 2, "", "more than 2 fraction digits"},
		{"1e-400", false, 38, 10, "", "more than 10 fraction digits"},
		{"1e999999999999", false, 38, 0, "", "integer digits"},
		{"+7.", true, 3, 1, "7.0", ""},
		{".5", true, 3, 1, "0.5", ""},
		{"007", true, 3, 0, "7", ""},
		{"99999999999999999999999999999999999999", false, 38, 0, "99999999999999999999999999999999999999", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			lit, _, ok := parseNumLit([]byte(tt.in), nil, tt.lenient)
			require.True(t, ok)
			got, err := appendDecimal(nil, lit, tt.p, tt.s)
			if tt.err != "" {
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
	for _, bad := range []string{"", "-", ".", "1e", "01", "1.", ".5", "+1", "1x", "--1", "0x10"} {
		_, _, ok := parseNumLit([]byte(bad), nil, false)
		assert.False(t, ok, "strict %q", bad)
	}
	for _, bad := range []string{"", ".", "+", "1e", "1..2", " 1"} {
		_, _, ok := parseNumLit([]byte(bad), nil, true)
		assert.False(t, ok, "lenient %q", bad)
	}
}

func TestIntegerParsing(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  error
	}{
		{"9007199254740993", 9007199254740993, nil},
		{"-9223372036854775808", -9223372036854775808, nil},
		{"-9223372036854775809", 0, errOverflow},
		{"9223372036854775807", 9223372036854775807, nil},
		{"92233720368547758070e-1", 9223372036854775807, nil},
		{"18446744073709551616", 0, errOverflow},
		{"1e19", 0, errOverflow},
		{"1e18", 1_000_000_000_000_000_000, nil},
		{"0.5", 0, errNotInteger},
		{"0e99999", 0, nil},
	}
	for _, tt := range tests {
		lit, _, ok := parseNumLit([]byte(tt.in), nil, false)
		require.True(t, ok, tt.in)
		got, err := lit.int64()
		assert.Equal(t, tt.err, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestScaleFloor(t *testing.T) {
	tests := []struct {
		in    string
		shift int
		want  int64
	}{
		{"1.5", 6, 1_500_000},
		{"1.0000005", 6, 1_000_000},
		{"-1.0000005", 6, -1_000_001},
		{"1999", -3, 1},
		{"-1", -3, -1},
		{"0.0001", 0, 0},
		{"-0.0001", 0, -1},
	}
	for _, tt := range tests {
		lit, _, ok := parseNumLit([]byte(tt.in), nil, false)
		require.True(t, ok)
		got, err := lit.scaleFloor(tt.shift)
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "%s shifted %d", tt.in, tt.shift)
	}
}

// TestCalendarAgreesWithTime checks the hand-written date and timestamp
// parsers against the time package over random instants in Delta's range.
func TestCalendarAgreesWithTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lo := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	for range 20000 {
		tm := time.Unix(lo+r.Int64N(hi-lo), int64(r.IntN(1e9))).UTC()
		y, m, d := tm.Date()
		assert.Equal(t, tm.Unix()/86400-boolInt(tm.Unix()%86400 < 0), daysFromCivil(y, int(m), d), tm)

		zone := time.FixedZone("", (r.IntN(48)-24)*1800)
		s := tm.In(zone).Format(time.RFC3339Nano)
		us, zoned, err := parseTimestamp([]byte(s))
		if tm.In(zone).Year() < 1 || tm.In(zone).Year() > 9999 {
			continue
		}
		require.NoError(t, err, s)
		assert.True(t, zoned)
		assert.Equal(t, tm.UnixMicro(), us, s)
	}
	assert.Equal(t, int64(minDays), daysFromCivil(1, 1, 1))
	assert.Equal(t, int64(maxDays), daysFromCivil(9999, 12, 31))

	for _, bad := range []string{"2024-13-01T00:00:00Z", "2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z",
		"2024-01-01T00:00:60Z", "2024-01-01T00:00:00.Z", "2024-01-01T00:00:00+0", "2024-01-01T00:00:00.1234567890Z",
		"2024-01-01", "2024-01-01T00:00:00Zjunk", "0000-01-01T00:00:00Z"} {
		_, _, err := parseTimestamp([]byte(bad))
		assert.Error(t, err, bad)
	}
	us, zoned, err := parseTimestamp([]byte("2024-01-01T00:00:00-0130"))
	require.NoError(t, err)
	assert.True(t, zoned)
	assert.Equal(t, time.Date(2024, 1, 1, 1, 30, 0, 0, time.UTC).UnixMicro(), us)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
