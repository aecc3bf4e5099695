package registry

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the Confluent wire format's header: the magic byte 0 and a
// 4-byte big-endian schema id. For Protobuf a message-index array follows it,
// which the codec reads.
//
// The format: https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format
const HeaderSize = 5

// magicByte is the wire format's first byte.
const magicByte = 0

// Framed reports whether value is in the wire format (at least the header,
// starting with the magic byte) and its schema id: ParseHeader without the
// error, for callers that only sort values (the Avro fast path).
func Framed(value []byte) (id int, ok bool) {
	if len(value) < HeaderSize || value[0] != magicByte {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(value[1:HeaderSize])), true
}

// ParseHeader splits a registry-framed value into its schema id and the
// bytes after the header. A value shorter than the header or without the
// magic byte is a *NotFramedError saying which. It reads the same header as
// franz-go's sr.ConfluentHeader.DecodeID, whose ErrBadHeader does not say
// which of the two it was.
func ParseHeader(value []byte) (id int, body []byte, err error) {
	switch {
	case len(value) < HeaderSize:
		return 0, nil, &NotFramedError{Reason: fmt.Sprintf("%d bytes, shorter than the %d-byte header", len(value), HeaderSize)}
	case value[0] != magicByte:
		return 0, nil, &NotFramedError{Reason: fmt.Sprintf("first byte %#02x, not the magic byte 0x00%s", value[0], looksLike(value))}
	}
	id, _ = Framed(value)
	return id, value[HeaderSize:], nil
}

// looksLike names what a value without the magic byte most likely is, as a
// hint for the user.
func looksLike(value []byte) string {
	switch value[0] {
	case '{', '[':
		return ": it looks like JSON"
	}
	return ""
}
