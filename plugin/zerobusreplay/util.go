package zerobusreplay

import "net/url"

func urlParse(s string) (*url.URL, error) { return url.Parse(s) }

// unescape decodes one path segment (the REST catalog escapes namespace
// separators and names); a malformed one is kept as is.
func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
