package emulator

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/benthos-zerobus/benthos-zerobus/internal/arrowipc"
)

// MaxDecompressedBytes bounds what one record batch frame may decompress
// to. A compressed Arrow IPC body declares each buffer's uncompressed
// length in its first 8 bytes, and arrow-go's reader allocates that much
// before decompressing: a 10 MiB frame declaring 100 GiB killed the
// emulator with an out-of-memory fatal error (found by FuzzDoPutFrame). The
// service's limit on decompressed size is not documented (assumption):
// 256 MiB is far above what a client cuts (the official SDK encodes with
// arrow-flight's FlightDataEncoderBuilder at its default, about 2 MiB per
// frame, databricks/zerobus-sdk rust/sdk/src/arrow_stream.rs; this output
// aims at the same) and small enough for any machine.
const MaxDecompressedBytes = 256 << 20

// checkDecompressedSize refuses a frame whose compressed body declares more
// than MaxDecompressedBytes, or whose compressed buffers lie outside its
// body, before the reader allocates anything.
func checkDecompressedSize(fd *flight.FlightData) error {
	n, err := arrowipc.DecompressedBodyBytes(fd.GetDataHeader(), fd.GetDataBody())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "malformed Flight data: %v", err)
	}
	if n > MaxDecompressedBytes {
		return status.Errorf(codes.InvalidArgument, "record batch decompresses to %d bytes, more than the %d the emulator accepts in one frame; send smaller batches", n, MaxDecompressedBytes)
	}
	return nil
}

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
