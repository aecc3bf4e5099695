package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest"
	"github.com/benthos-zerobus/benthos-zerobus/internal/ingest/ingestfake"
	"github.com/benthos-zerobus/benthos-zerobus/internal/pool"
)

// pausingStream holds each Submit, after the rows were accepted, until
// resume is closed.
type pausingStream struct {
	*ingestfake.Stream
	submitted chan struct{}
	resume    chan struct{}
}

func (s pausingStream) Submit(ctx context.Context, rec arrow.RecordBatch) (ingest.Span, error) {
	span, err := s.Stream.Submit(ctx, rec)
	close(s.submitted)
	<-s.resume
	return span, err
}

type pausingOpener struct {
	*ingestfake.Opener
	submitted, resume chan struct{}
}

func (o pausingOpener) Open(ctx context.Context, table string, schema *arrow.Schema) (ingest.Stream, error) {
	s, err := o.Opener.Open(ctx, table, schema)
	if err != nil {
		return nil, err
	}
	return pausingStream{Stream: s.(*ingestfake.Stream), submitted: o.submitted, resume: o.resume}, nil
}

// Rows submitted whose lane refuses them (here: closed meanwhile) come back
// as ErrUntracked, so the caller never takes the write for one that sent
// nothing.
func TestWriteSubmittedButNotTrackedIsErrUntracked(t *testing.T) {
	ctx := testCtx(t)
	o := pausingOpener{Opener: ingestfake.NewOpener(ingestfake.Config{}), submitted: make(chan struct{}), resume: make(chan struct{})}
	p := pool.New(o, table, ingestfake.TestSchema, fastConfig(1), nil)
	require.NoError(t, p.Connect(ctx))
	errc := make(chan error, 1)
	go func() {
		_, err := p.Write(ctx, "", rec(2))
		errc <- err
	}()
	<-o.submitted
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, p.Close(cctx))
	close(o.resume)
	select {
	case err := <-errc:
		require.Error(t, err)
		require.True(t, errors.Is(err, pool.ErrUntracked), "got %v", err)
	case <-ctx.Done():
		t.Fatal("the write did not return")
	}
}
