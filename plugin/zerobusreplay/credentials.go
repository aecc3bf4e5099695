package zerobusreplay

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"sync"
	"time"

	iceio "github.com/apache/iceberg-go/io"
	icebergs3 "github.com/apache/iceberg-go/io/gocloud/s3"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/utils"
	"github.com/aws/aws-sdk-go-v2/aws"
)

// Load-table config keys of vended S3 credentials (Iceberg REST spec,
// LoadTableResult config; iceberg-go io.S3*).
const (
	keyAccessKey    = iceio.S3AccessKeyID
	keySecretKey    = iceio.S3SecretAccessKey
	keySessionToken = iceio.S3SessionToken
)

// vendedCredentials is the S3 credentials provider of the replay's storage
// reads: it hands out the credentials the catalog vended with the table
// and, when they expire within margin, reloads the table through the
// catalog (which vends fresh ones) first. Credentials are looked up per S3
// request, so one file IO serves a whole read of many data files and a
// read that outlives its credentials renews them mid-way, between two
// requests, instead of failing.
type vendedCredentials struct {
	margin time.Duration
	// reload loads the table again and returns the config it was vended.
	reload func(ctx context.Context) (map[string]string, error)
	// debugf logs a renewal.
	debugf func(format string, args ...any)

	mu  sync.Mutex
	cfg map[string]string
}

// expiry is when cfg's credentials expire; zero when it does not say.
func expiry(cfg map[string]string) time.Time {
	if ms, err := strconv.ParseInt(cfg[keyExpiresAt], 10, 64); err == nil {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// Retrieve implements aws.CredentialsProvider.
func (v *vendedCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if exp := expiry(v.cfg); !exp.IsZero() && time.Until(exp) < v.margin {
		v.debugf("zerobus_replay: vended credentials expire at %s: reloading the table", exp.Format(time.RFC3339))
		cfg, err := v.reload(ctx)
		if err != nil {
			return aws.Credentials{}, fmt.Errorf("renew the vended storage credentials (reload the table): %w", err)
		}
		if cfg[keyAccessKey] == "" {
			return aws.Credentials{}, errNoCredentials
		}
		v.cfg = cfg
	}
	exp := expiry(v.cfg)
	return aws.Credentials{
		AccessKeyID: v.cfg[keyAccessKey], SecretAccessKey: v.cfg[keySecretKey], SessionToken: v.cfg[keySessionToken],
		Source: "unity-catalog-vended", CanExpire: !exp.IsZero(), Expires: exp,
	}, nil
}

// renewingFS returns the file IO function of tbl reading its files through
// one S3 configuration built once (the SDK's default configuration loads
// shared files, environment and CA bundles, far too slow to repeat for
// every file IO) whose credentials come from creds, so they are renewed
// while a read is under way. A table whose config vended no S3 credentials,
// or not at an s3:// location, keeps its own.
func renewingFS(ctx context.Context, tbl *table.Table, cfg map[string]string, creds *vendedCredentials) (table.FSysF, error) {
	loc := tbl.MetadataLocation()
	if u, err := url.Parse(loc); err != nil || (u.Scheme != "s3" && u.Scheme != "s3a" && u.Scheme != "s3n") || cfg[keyAccessKey] == "" {
		return tbl.FS, nil
	}
	props := maps.Clone(cfg)
	// Without the static key pair in the props, iceberg-go keeps the
	// configuration's credentials provider: creds.
	delete(props, keyAccessKey)
	delete(props, keySecretKey)
	delete(props, keySessionToken)
	base, err := icebergs3.ParseAWSConfig(ctx, props)
	if err != nil {
		return nil, fmt.Errorf("S3 configuration from the vended table config: %w", err)
	}
	base.Credentials = aws.NewCredentialsCache(creds, func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = creds.margin
	})
	return func(ctx context.Context) (iceio.IO, error) {
		return iceio.LoadFS(utils.WithAwsConfig(ctx, base), props, loc)
	}, nil
}
