package acklane_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
