package emulator

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// validateBatch fully validates a received record batch before anything
// reads its values: buffer sizes, offsets (in bounds, non-decreasing),
// UTF-8 of strings, null counts, children and dictionary indices, with
// arrow-go's array.ValidateRecordFull. arrow-go's IPC reader checks the
// message framing but not the values' layout, so a batch whose offsets
// point past its data buffer is accepted by the reader and then panics
// whatever reads it (the Parquet writer, in the table store's goroutine,
// taking every stream with it). The service builds record batches with
// arrow-rs, whose readers validate what they decode (arrow-ipc's reader
// builds ArrayData with validation, apache/arrow-rs arrow-ipc/src/reader.rs),
// so such a batch never reaches its tables either; the status it returns is
// an assumption (INVALID_ARGUMENT, as for every malformed batch).
//
// arrow-go's validation itself indexes the data buffer while it walks the
// offsets (LargeString.ValidateFull slices values[offsets[i-1]:offsets[i]]
// before it checks the next offset is in bounds): a panic during
// validation is the batch's fault, so it is turned into the same refusal.
func validateBatch(rec arrow.RecordBatch) error {
	for i := range int(rec.NumCols()) {
		if err := validateColumn(rec.Column(i)); err != nil {
			return fmt.Errorf("invalid record batch: column %d (%s): %w", i, rec.ColumnName(i), err)
		}
	}
	return nil
}

// validateColumn is array.ValidateFull, a panic included.
func validateColumn(col arrow.Array) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("offsets or lengths out of the bounds of its buffers (%v)", r)
		}
	}()
	return array.ValidateFull(col)
}

// recoverStream is the last line of defence of one stream's receive loop:
// a panic while decoding, checking or converting what the client sent ends
// that stream with INTERNAL, logged with its stack, instead of the process
// (grpc-go does not recover handler panics, and the loop runs in its own
// goroutine anyway). What it guards is the stream's own state (its reader,
// converter and session), which dies with the stream. The table store's
// goroutine, shared by every stream of a table, is not guarded: a panic
// there would leave a Parquet file or a Delta commit half written, which
// only a restart (replaying the log) can make safe; validateBatch keeps
// malformed data from ever reaching it.
func recoverStream(log *slog.Logger, table string, err *error) {
	if r := recover(); r != nil {
		log.Error("flight stream panicked: the stream is ended, the emulator keeps serving", "table", table, "panic", r, "stack", string(debug.Stack()))
		*err = status.Errorf(codes.Internal, "emulator: internal error while reading the stream (see the emulator's log): %v", r)
	}
}
