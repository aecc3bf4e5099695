//go:build zerobus_bench

package main

import (
	"context"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// noop_batch is a batch output that does nothing, compiled only into the
// benchmark build (-tags zerobus_bench). BenchmarkPipelineVsDrop runs it
// with the zerobus output's default batching and max_in_flight, beside
// drop and zerobus in the same binary: what the engine's batch-output
// machinery (the batcher and its byte_size tally, the in-flight writers,
// their per-message tracking) costs before an output does any work, which
// is the most zerobus ÷ drop can reach.
func init() {
	spec := service.NewConfigSpec().
		Summary("Benchmark only: a batch output that does nothing.").
		Fields(service.NewBatchPolicyField("batching"), service.NewOutputMaxInFlightField())
	service.MustRegisterBatchOutput("noop_batch", spec, func(conf *service.ParsedConfig, _ *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
		policy, err := conf.FieldBatchPolicy("batching")
		if err != nil {
			return nil, policy, 0, err
		}
		n, err := conf.FieldMaxInFlight()
		return noopBatch{}, policy, n, err
	})
}

type noopBatch struct{}

func (noopBatch) Connect(context.Context) error                          { return nil }
func (noopBatch) WriteBatch(context.Context, service.MessageBatch) error { return nil }
func (noopBatch) Close(context.Context) error                            { return nil }
