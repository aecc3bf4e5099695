package tablewriter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The zero Engine holds nothing: opening and closing it are no-ops, so an
// output can close an engine whose writers were never built.
func TestEngineZeroValue(t *testing.T) {
	var e Engine
	require.NoError(t, e.Open(context.Background()))
	require.NoError(t, e.Close(context.Background()))
	require.Nil(t, e.DeadLetterWriter())
}
