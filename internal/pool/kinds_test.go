package pool_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/acklane"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// A pool's lanes are of the kind it was made with: New's confirm raw
// anchors, NewOf[DerivedCoverage]'s derived coverage, on every member, for
// every ticket, and across a rebuild of a member's stream.
func TestPoolLaneKindIsChosenAtConstruction(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(*ingestfake.Opener) *pool.Pool
		want acklane.Kind
	}{
		{"New", func(o *ingestfake.Opener) *pool.Pool {
			return pool.New(o, table, ingestfake.TestSchema, fastConfig(2), nil)
		}, acklane.KindRawAnchor},
		{"NewOf raw anchor", func(o *ingestfake.Opener) *pool.Pool {
			return pool.NewOf[acklane.RawAnchor](o, table, ingestfake.TestSchema, fastConfig(2), nil)
		}, acklane.KindRawAnchor},
		{"NewOf derived coverage", func(o *ingestfake.Opener) *pool.Pool {
			return pool.NewOf[acklane.DerivedCoverage](o, table, ingestfake.TestSchema, fastConfig(2), nil)
		}, acklane.KindDerivedCoverage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			o := ingestfake.NewOpener(ingestfake.Config{})
			p := tc.make(o)
			defer func() { _ = p.Close(ctx) }()
			require.NoError(t, p.Connect(ctx))
			assert.Equal(t, tc.want, p.Kind())

			check := func(phase string) {
				for range 4 { // round-robin: both members
					tk, err := p.Write(ctx, "", rec(2))
					require.NoError(t, err)
					require.NoError(t, tk.Wait(ctx), phase)
					assert.Equal(t, tc.want, tk.Kind(), "%s: ticket of stream %d", phase, tk.Stream)
				}
				for _, m := range p.Health().Members {
					assert.Equal(t, tc.want, m.Lane.Kind, "%s: lane of member %d", phase, m.Index)
				}
			}
			check("first streams")
			o.Streams()[0].Poison(ingestfake.ErrPoison("gone"))
			require.Eventually(t, func() bool {
				st := p.Stats()
				for _, m := range st.Members {
					if !m.Healthy {
						return false
					}
				}
				return st.Rebuilds > 0
			}, 10*time.Second, 5*time.Millisecond, "the poisoned stream is rebuilt")
			check("after a rebuild")
		})
	}
}

// The lane kind is enforced by the type checker inside the pool, where the
// typed lanes live: each file of testdata/kinds is added to package pool
// (go build -overlay) and must compile (ok.go) or be rejected with the
// expected message. This is what keeps a coverage pool's lanes from ever
// carrying a raw-anchor confirmation, whatever code in the pool does.
func TestPoolLaneKindsAreSeparatedAtCompileTime(t *testing.T) {
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool is needed to prove compile errors")
	pkgDir, err := os.Getwd()
	require.NoError(t, err)
	cases := []struct {
		file    string
		wantErr string // empty: must compile
	}{
		{file: "ok.go"},
		{file: "raw_into_coverage_lane.go", wantErr: "acklane.Pending[acklane.RawAnchor]) as acklane.Pending[acklane.DerivedCoverage] value"},
		{file: "raw_in_coverage_pending.go", wantErr: "acklane.RawAnchor) as acklane.DerivedCoverage value"},
		{file: "raw_in_any_lane.go", wantErr: "acklane.RawAnchor) as C value"},
		{file: "foreign_kind.go", wantErr: "callback does not satisfy acklane.Confirmation"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			src, err := filepath.Abs(filepath.Join("testdata", "kinds", tc.file))
			require.NoError(t, err)
			overlay, err := json.Marshal(map[string]map[string]string{
				"Replace": {filepath.Join(pkgDir, "zz_kind_proof_test_overlay.go"): src},
			})
			require.NoError(t, err)
			ov := filepath.Join(t.TempDir(), "overlay.json")
			require.NoError(t, os.WriteFile(ov, overlay, 0o600))
			cmd := exec.CommandContext(t.Context(), goTool, "build", "-overlay", ov, ".")
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
