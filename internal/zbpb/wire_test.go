package zbpb

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// TestCreateStreamBytesMatchOfficialSDK checks our first message against the
// bytes captured from the official SDK for table main.default.t1.
func TestCreateStreamBytesMatchOfficialSDK(t *testing.T) {
	msg := &EphemeralStreamRequest{Payload: &EphemeralStreamRequest_CreateStream{
		CreateStream: &CreateIngestStreamRequest{
			TableName:  proto.String("main.default.t1"),
			RecordType: RecordType_JSON.Enum(),
		},
	}}
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	require.NoError(t, err)
	want := append([]byte{0x0a, 0x13, 0x0a, 0x0f}, "main.default.t1"...)
	want = append(want, 0x20, 0x02)
	require.Equal(t, want, got)
}
