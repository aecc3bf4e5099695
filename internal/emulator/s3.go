package emulator

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator/workspace"
)

// The storage side of the emulator: an S3-compatible endpoint serving each
// table's directory (Parquet data files, _delta_log, Iceberg metadata) at
// the table's storage_location, read-only, to holders of the temporary
// credentials the Iceberg REST catalog vends with a table (icebergrest.go).
// Objects are served by gofakes3 over a read-only backend of the data
// directory; gofakes3 checks no signature, so every request first passes
// verifySigV4, which checks AWS Signature Version 4 against the vended
// credentials.

const (
	// s3Bucket and s3TablesPrefix form each table's storage_location,
	// s3://emulator-metastore/__unitystorage/tables/<table_id> (the
	// workspace's default, shaped like a Unity Catalog managed location).
	s3Bucket       = "emulator-metastore"
	s3TablesPrefix = "__unitystorage/tables/"
	// s3Region is the region the credentials are vended for (client.region)
	// and the only one their signatures may name.
	s3Region = "us-east-1"
	// maxClockSkew is how far X-Amz-Date may be from the server clock: S3
	// refuses requests more than 15 minutes off with RequestTimeTooSkewed
	// (AWS S3 API reference, "Error responses").
	maxClockSkew = 15 * time.Minute
)

// tableLocation is the storage_location of t.
func tableLocation(t workspace.Table) string {
	return "s3://" + s3Bucket + "/" + s3TablesPrefix + t.TableID
}

// s3Credential is one vended set of temporary credentials, valid for reads
// under keyPrefix (a table's location) until expires.
type s3Credential struct {
	secret, token string
	keyPrefix     string // "__unitystorage/tables/<id>/"
	expires       time.Time
}

// s3Credentials holds the credentials vended and not yet expired.
type s3Credentials struct {
	now func() time.Time
	mu  sync.Mutex
	// byKey: access key id → credential.
	byKey map[string]s3Credential
}

func newS3Credentials(now func() time.Time) *s3Credentials {
	return &s3Credentials{now: now, byKey: map[string]s3Credential{}}
}

// issue vends credentials for reads under the location of the table with id
// tableID, valid for ttl.
func (c *s3Credentials) issue(tableID string, ttl time.Duration) (keyID string, cred s3Credential) {
	now := c.now()
	// Access key ids of temporary (STS) credentials start with ASIA.
	keyID = "ASIA" + strings.ToUpper(workspace.RandomHex(8))
	cred = s3Credential{
		secret:    workspace.RandomHex(20),
		token:     "emulator-session-" + workspace.RandomHex(32),
		keyPrefix: s3TablesPrefix + tableID + "/",
		expires:   now.Add(ttl),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.byKey {
		if !v.expires.After(now) {
			delete(c.byKey, k)
		}
	}
	c.byKey[keyID] = cred
	return keyID, cred
}

// lookup returns the credential of keyID, expired ones included (so that an
// expired key is told apart from an unknown one, as S3 does).
func (c *s3Credentials) lookup(keyID string) (s3Credential, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cred, ok := c.byKey[keyID]
	return cred, ok
}

// s3Error is the XML error body of S3 (AWS S3 API reference, "Error
// responses": Code, Message, Resource, RequestId).
type s3Error struct {
	XMLName  xml.Name `xml:"Error"`
	Code     string   `xml:"Code"`
	Message  string   `xml:"Message"`
	Resource string   `xml:"Resource,omitempty"`
}

func writeS3Error(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	b, _ := xml.Marshal(s3Error{Code: code, Message: msg, Resource: r.URL.Path})
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

// s3Handler checks each request's signature and scope, refuses writes, and
// hands what is left to gofakes3.
func (s *Server) s3Handler() http.Handler {
	fake := gofakes3.New(&readOnlyBackend{srv: s},
		gofakes3.WithLogger(gofakes3.DiscardLog()),
		gofakes3.WithoutVersioning(),
		// The signature check below owns the clock check.
		gofakes3.WithTimeSkewLimit(0),
	).Server()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, status, code, msg := s.verifySigV4(r)
		if status != 0 {
			s.log.Debug("s3 request refused", "method", r.Method, "path", r.URL.Path, "code", code, "reason", msg)
			writeS3Error(w, r, status, code, msg)
			return
		}
		// Unity Catalog vends READ credentials for managed tables only
		// (temporary-table-credentials: "READ_WRITE ... not supported for
		// managed table"), so every write is AccessDenied.
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeS3Error(w, r, http.StatusForbidden, "AccessDenied", "the vended credentials allow reads only")
			return
		}
		if !inScope(r, cred.keyPrefix) {
			writeS3Error(w, r, http.StatusForbidden, "AccessDenied", "the vended credentials do not cover this location")
			return
		}
		fake.ServeHTTP(w, r)
	})
}

// inScope reports whether a path-style request stays within the bucket
// prefix the credential was vended for: an object under it, or a listing
// whose prefix is under it.
func inScope(r *http.Request, keyPrefix string) bool {
	p := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(p, "/")
	if bucket != s3Bucket {
		return false
	}
	if key == "" {
		return strings.HasPrefix(r.URL.Query().Get("prefix"), keyPrefix)
	}
	return strings.HasPrefix(key, keyPrefix)
}

// verifySigV4 authenticates a request signed with AWS Signature Version 4 in
// the Authorization header, the form the AWS SDKs (and so iceberg-go's S3
// file IO) send. The algorithm follows the AWS documentation "Create a signed
// AWS API request" (IAM user guide, Signature Version 4) and "Authenticating
// Requests: Using the Authorization Header" (S3 API reference): canonical
// request (method, URI as sent, sorted URI-encoded query, signed headers,
// x-amz-content-sha256 as payload hash), string to sign
// ("AWS4-HMAC-SHA256", X-Amz-Date, scope, hex SHA-256 of the canonical
// request), and the HMAC-SHA256 key chain "AWS4"+secret → date → region →
// service → "aws4_request". Temporary credentials must present their session
// token in a signed X-Amz-Security-Token header. On refusal it returns the
// HTTP status, S3 error code and a message; S3's statuses are kept (403 for
// an unknown key or a wrong signature, 400 for an expired or invalid token).
func (s *Server) verifySigV4(r *http.Request) (s3Credential, int, string, string) {
	const algo = "AWS4-HMAC-SHA256"
	auth := r.Header.Get("Authorization")
	if auth == "" {
		if r.URL.Query().Get("X-Amz-Signature") != "" {
			return s3Credential{}, http.StatusForbidden, "AccessDenied", "presigned URLs are not vended by this endpoint"
		}
		return s3Credential{}, http.StatusForbidden, "AccessDenied", "anonymous access is not allowed: sign requests with the vended credentials"
	}
	rest, ok := strings.CutPrefix(auth, algo+" ")
	if !ok {
		return s3Credential{}, http.StatusBadRequest, "InvalidArgument", "unsupported Authorization type: want " + algo
	}
	var credential, signedHeaders, signature string
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			credential = v
		case "SignedHeaders":
			signedHeaders = v
		case "Signature":
			signature = v
		}
	}
	scope := strings.Split(credential, "/")
	if len(scope) != 5 || signedHeaders == "" || signature == "" {
		return s3Credential{}, http.StatusBadRequest, "AuthorizationHeaderMalformed", "want Credential=<key>/<date>/<region>/s3/aws4_request, SignedHeaders and Signature"
	}
	keyID, date, region, service, term := scope[0], scope[1], scope[2], scope[3], scope[4]
	if service != "s3" || term != "aws4_request" {
		return s3Credential{}, http.StatusBadRequest, "AuthorizationHeaderMalformed", "credential scope must end /s3/aws4_request"
	}
	if region != s3Region {
		return s3Credential{}, http.StatusBadRequest, "AuthorizationHeaderMalformed", fmt.Sprintf("the region %q is wrong; expecting %q", region, s3Region)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, date) {
		return s3Credential{}, http.StatusBadRequest, "AuthorizationHeaderMalformed", "X-Amz-Date missing, malformed, or not the date of the credential scope"
	}
	now := time.Now()
	if at.Sub(now) > maxClockSkew || now.Sub(at) > maxClockSkew {
		return s3Credential{}, http.StatusForbidden, "RequestTimeTooSkewed", "the difference between the request time and the server's time is too large"
	}
	cred, ok := s.s3creds.lookup(keyID)
	if !ok {
		return s3Credential{}, http.StatusForbidden, "InvalidAccessKeyId", "the AWS access key id you provided does not exist in our records"
	}
	signed := strings.Split(signedHeaders, ";")
	if !containsFold(signed, "host") || !containsFold(signed, "x-amz-date") || !containsFold(signed, "x-amz-security-token") {
		return s3Credential{}, http.StatusBadRequest, "AuthorizationHeaderMalformed", "SignedHeaders must include host, x-amz-date and x-amz-security-token"
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Amz-Security-Token")), []byte(cred.token)) != 1 {
		return s3Credential{}, http.StatusBadRequest, "InvalidToken", "the provided token is malformed or otherwise invalid"
	}
	if !cred.expires.After(s.s3creds.now()) {
		return s3Credential{}, http.StatusBadRequest, "ExpiredToken", "the provided token has expired"
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	if payloadHash == "" {
		return s3Credential{}, http.StatusBadRequest, "InvalidRequest", "missing required header for this request: x-amz-content-sha256"
	}
	canonical := canonicalRequest(r, signed, payloadHash)
	sum := sha256.Sum256([]byte(canonical))
	stringToSign := algo + "\n" + amzDate + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(sum[:])
	key := hmacSHA256([]byte("AWS4"+cred.secret), date)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, term)
	want := hex.EncodeToString(hmacSHA256(key, stringToSign))
	if subtle.ConstantTimeCompare([]byte(want), []byte(signature)) != 1 {
		return s3Credential{}, http.StatusForbidden, "SignatureDoesNotMatch", "the request signature we calculated does not match the signature you provided"
	}
	return cred, 0, "", ""
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalRequest builds the SigV4 canonical request. The URI is taken as
// the client sent it: S3 signs the path encoded once, without normalisation.
func canonicalRequest(r *http.Request, signed []string, payloadHash string) string {
	uri := r.RequestURI
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	if uri == "" {
		uri = "/"
	}
	var b strings.Builder
	b.WriteString(r.Method + "\n" + uri + "\n" + canonicalQuery(r.URL.RawQuery) + "\n")
	for _, h := range signed {
		h = strings.ToLower(h)
		var v string
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			vals := r.Header.Values(h)
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			v = strings.Join(vals, ",")
		}
		b.WriteString(h + ":" + v + "\n")
	}
	b.WriteString("\n" + strings.Join(signed, ";") + "\n" + payloadHash)
	return b.String()
}

// canonicalQuery URI-encodes every name and value (RFC 3986 unreserved
// characters kept) and sorts the pairs by name, then value.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	type pair struct{ k, v string }
	var pairs []pair
	for _, kv := range strings.Split(raw, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.QueryUnescape(v); err == nil {
			v = dv
		}
		pairs = append(pairs, pair{awsURIEncode(k), awsURIEncode(v)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = p.k + "=" + p.v
	}
	return strings.Join(parts, "&")
}

func awsURIEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// readOnlyBackend is a gofakes3 backend over the data directory: object
// "__unitystorage/tables/<table_id>/<path>" of bucket emulator-metastore is
// file <path> of that table's directory. Every write is refused.
type readOnlyBackend struct{ srv *Server }

var _ gofakes3.Backend = (*readOnlyBackend)(nil)

// resolve maps an object key to a file, or reports it missing.
func (b *readOnlyBackend) resolve(bucket, key string) (string, error) {
	if bucket != s3Bucket {
		return "", gofakes3.BucketNotFound(bucket)
	}
	rest, ok := strings.CutPrefix(key, s3TablesPrefix)
	if !ok {
		return "", gofakes3.KeyNotFound(key)
	}
	id, rel, ok := strings.Cut(rest, "/")
	t, found := b.srv.reg.GetByID(id)
	if !ok || !found || rel == "" {
		return "", gofakes3.KeyNotFound(key)
	}
	clean := path.Clean("/" + rel)[1:]
	if clean != rel {
		return "", gofakes3.KeyNotFound(key)
	}
	return filepath.Join(b.srv.tableDir(t.FullName), filepath.FromSlash(rel)), nil
}

func (b *readOnlyBackend) ListBuckets() ([]gofakes3.BucketInfo, error) {
	return []gofakes3.BucketInfo{{Name: s3Bucket, CreationDate: gofakes3.NewContentTime(time.Unix(0, 0))}}, nil
}

// ListBucket lists the objects of one table (the prefix must name it: the
// vended credentials cover one table), without delimiter roll-up beyond what
// gofakes3's Prefix matching does.
func (b *readOnlyBackend) ListBucket(name string, prefix *gofakes3.Prefix, page gofakes3.ListBucketPage) (*gofakes3.ObjectList, error) {
	if name != s3Bucket {
		return nil, gofakes3.BucketNotFound(name)
	}
	list := gofakes3.NewObjectList()
	if prefix == nil || !prefix.HasPrefix {
		return list, nil
	}
	rest, ok := strings.CutPrefix(prefix.Prefix, s3TablesPrefix)
	id, _, _ := strings.Cut(rest, "/")
	t, found := b.srv.reg.GetByID(id)
	if !ok || !found {
		return list, nil
	}
	dir := b.srv.tableDir(t.FullName)
	base := s3TablesPrefix + id + "/"
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		key := base + filepath.ToSlash(rel)
		var m gofakes3.PrefixMatch
		if !prefix.Match(key, &m) {
			return nil
		}
		if m.CommonPrefix {
			list.AddPrefix(m.MatchedPart)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		list.Add(&gofakes3.Content{Key: key, LastModified: gofakes3.NewContentTime(info.ModTime()), ETag: `"` + hex.EncodeToString(fileTag(info)) + `"`, Size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix.Prefix, err)
	}
	return list, nil
}

// fileTag is the object's ETag: a digest of size and modification time
// (files are immutable once written, so this changes only if the file does).
func fileTag(info fs.FileInfo) []byte {
	h := md5.Sum([]byte(fmt.Sprintf("%s/%d/%d", info.Name(), info.Size(), info.ModTime().UnixNano())))
	return h[:]
}

func (b *readOnlyBackend) open(bucket, key string, rng *gofakes3.ObjectRangeRequest, body bool) (*gofakes3.Object, error) {
	p, err := b.resolve(bucket, key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, gofakes3.KeyNotFound(key)
	}
	info, err := f.Stat()
	if err != nil || info.IsDir() {
		f.Close()
		return nil, gofakes3.KeyNotFound(key)
	}
	obj := &gofakes3.Object{Name: key, Metadata: map[string]string{}, Size: info.Size(), Hash: fileTag(info)}
	if !body {
		f.Close()
		obj.Contents = io.NopCloser(strings.NewReader(""))
		return obj, nil
	}
	r, err := rng.Range(info.Size())
	if err != nil {
		f.Close()
		return nil, err
	}
	obj.Range = r
	if r == nil {
		obj.Contents = f
		return obj, nil
	}
	obj.Contents = struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, r.Start, r.Length), f}
	return obj, nil
}

func (b *readOnlyBackend) GetObject(bucket, key string, rng *gofakes3.ObjectRangeRequest) (*gofakes3.Object, error) {
	return b.open(bucket, key, rng, true)
}

func (b *readOnlyBackend) HeadObject(bucket, key string) (*gofakes3.Object, error) {
	return b.open(bucket, key, nil, false)
}

func (b *readOnlyBackend) BucketExists(name string) (bool, error) { return name == s3Bucket, nil }

var errReadOnly = gofakes3.ErrorMessage(gofakes3.ErrorCode("AccessDenied"), "the emulator's storage endpoint is read-only")

func (b *readOnlyBackend) CreateBucket(string) error      { return errReadOnly }
func (b *readOnlyBackend) DeleteBucket(string) error      { return errReadOnly }
func (b *readOnlyBackend) ForceDeleteBucket(string) error { return errReadOnly }
func (b *readOnlyBackend) DeleteObject(string, string) (gofakes3.ObjectDeleteResult, error) {
	return gofakes3.ObjectDeleteResult{}, errReadOnly
}
func (b *readOnlyBackend) PutObject(string, string, map[string]string, io.Reader, int64, *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	return gofakes3.PutObjectResult{}, errReadOnly
}
func (b *readOnlyBackend) DeleteMulti(string, ...string) (gofakes3.MultiDeleteResult, error) {
	return gofakes3.MultiDeleteResult{}, errReadOnly
}
func (b *readOnlyBackend) CopyObject(string, string, string, string, map[string]string) (gofakes3.CopyObjectResult, error) {
	return gofakes3.CopyObjectResult{}, errReadOnly
}
