package acklane_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
)

// TestLaneKindsAreSeparatedAtCompileTime builds the programs under
// testdata/kinds with the go tool: the positive control must compile, and
// every program that mixes confirmation kinds must be rejected by the type
// checker with the expected message.
func TestLaneKindsAreSeparatedAtCompileTime(t *testing.T) {
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool is needed to prove compile errors")

	cases := []struct {
		dir     string
		wantErr string // empty: must compile
	}{
		{dir: "ok"},
		{
			dir:     "derived_into_raw_lane",
			wantErr: "acklane.Pending[acklane.DerivedCoverage]) as acklane.Pending[acklane.RawAnchor] value",
		},
		{
			dir:     "derived_in_raw_pending",
			wantErr: "acklane.DerivedCoverage) as acklane.RawAnchor value",
		},
		{
			dir:     "foreign_kind",
			wantErr: "callback does not satisfy acklane.Confirmation",
		},
	}
	for _, tc := range cases {
		t.Run(tc.dir, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), goTool, "build", "-o", os.DevNull, "./testdata/kinds/"+tc.dir)
			cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
			out, err := cmd.CombinedOutput()
			if tc.wantErr == "" {
				require.NoError(t, err, "positive control must compile:\n%s", out)
				return
			}
			require.Error(t, err, "mixing lane kinds compiled")
			assert.Contains(t, string(out), tc.wantErr)
		})
	}
}

// NewConfirmation makes a confirmation of the kind asked for, tied to the
// receipt it returns: a lane of that kind settles exactly that receipt, and
// its health names the kind.
func TestNewConfirmationMakesTheKindAskedFor(t *testing.T) {
	ctx := context.Background()

	raw, rr := acklane.NewConfirmation[acklane.RawAnchor]()
	require.NotNil(t, rr)
	assert.Same(t, rr, raw.Receipt())
	assert.Equal(t, acklane.KindRawAnchor, raw.Kind())
	assert.Equal(t, acklane.KindRawAnchor, acklane.KindOf[acklane.RawAnchor]())

	der, dr := acklane.NewConfirmation[acklane.DerivedCoverage]()
	require.NotNil(t, dr)
	assert.Same(t, dr, der.Receipt())
	assert.NotSame(t, rr, dr, "every confirmation has its own receipt")
	assert.Equal(t, acklane.KindDerivedCoverage, der.Kind())
	assert.Equal(t, acklane.KindDerivedCoverage, acklane.KindOf[acklane.DerivedCoverage]())

	s := openStream(t, ingestfake.Config{ManualAck: true})
	lane := acklane.New[acklane.DerivedCoverage](s, acklane.Config{}, nil)
	defer lane.Close()
	assert.Equal(t, acklane.KindDerivedCoverage, lane.Health().Kind)
	span, err := s.Submit(ctx, ingestfake.NewRecord(s.Schema(), 3))
	require.NoError(t, err)
	require.NoError(t, lane.Enqueue(ctx, acklane.Pending[acklane.DerivedCoverage]{To: span.To, Confirm: der}))
	assert.False(t, dr.Settled(), "not durable yet")
	s.AckAll()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, dr.Wait(wctx), "the lane confirmed the receipt NewConfirmation returned")
	assert.False(t, rr.Settled(), "the other kind's receipt is untouched")
}
