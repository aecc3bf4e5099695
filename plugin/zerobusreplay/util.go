package zerobusreplay

import "net/url"

// unescape decodes one path segment (the REST catalog escapes namespace
// separators and names); a malformed one is kept as is.
func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
