package zerobusreplay

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Credentials are renewed (the table reloaded) only once they expire within
// the margin, and a renewal that fails or vends nothing is an error saying so.
func TestVendedCredentialsRenewWithinMargin(t *testing.T) {
	expires := func(d time.Duration) string { return formatMillis(time.Now().Add(d)) }
	reloads := 0
	next := map[string]string{keyAccessKey: "AK2", keySecretKey: "SK2", keySessionToken: "T2", keyExpiresAt: expires(time.Hour)}
	v := &vendedCredentials{
		margin: time.Minute, debugf: func(string, ...any) {},
		cfg:    map[string]string{keyAccessKey: "AK1", keySecretKey: "SK1", keySessionToken: "T1", keyExpiresAt: expires(10 * time.Minute)},
		reload: func(context.Context) (map[string]string, error) { reloads++; return next, nil },
	}
	c, err := v.Retrieve(context.Background())
	require.NoError(t, err)
	assert.Equal(t, aws.Credentials{AccessKeyID: "AK1", SecretAccessKey: "SK1", SessionToken: "T1", Source: c.Source, CanExpire: true, Expires: c.Expires}, c)
	assert.Zero(t, reloads, "10 minutes left, margin 1 minute: no reload")

	v.cfg[keyExpiresAt] = expires(30 * time.Second)
	c, err = v.Retrieve(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "AK2", c.AccessKeyID)
	assert.Equal(t, "T2", c.SessionToken)
	assert.Equal(t, 1, reloads)
	assert.WithinDuration(t, time.Now().Add(time.Hour), c.Expires, 5*time.Second)

	v.cfg = map[string]string{keyAccessKey: "AK1", keyExpiresAt: expires(time.Second)}
	next = map[string]string{}
	_, err = v.Retrieve(context.Background())
	require.ErrorIs(t, err, errNoCredentials)
	v.reload = func(context.Context) (map[string]string, error) { return nil, errors.New("catalog down") }
	_, err = v.Retrieve(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "renew the vended storage credentials")
	assert.Contains(t, err.Error(), "catalog down")
}

func formatMillis(t time.Time) string {
	return strconv.FormatInt(t.UnixMilli(), 10)
}
