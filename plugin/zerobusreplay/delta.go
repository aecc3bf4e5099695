package zerobusreplay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// deltaLogState is what the Delta log says beyond the Iceberg conversion.
type deltaLogState struct {
	version   int64 // newest Delta commit
	rowsAfter int64 // rows added by commits newer than the converted version
}

// readDeltaLog lists the table's _delta_log with the storage credentials
// the Iceberg REST catalog vended (they cover the table's whole location)
// and returns the newest commit version and the rows added after the
// converted version (from each add action's stats.numRecords), so the lag
// is reported in rows, not only in versions. UC's table info reports the
// converted version but not the Delta one; the log is the Delta protocol's
// source of truth for it (PROTOCOL.md, "Delta Log Entries").
func readDeltaLog(ctx context.Context, cfg map[string]string, location string, converted int64) (deltaLogState, error) {
	if cfg["s3.access-key-id"] == "" {
		return deltaLogState{}, errNoCredentials
	}
	u, err := url.Parse(location)
	if err != nil || u.Scheme != "s3" {
		return deltaLogState{}, fmt.Errorf("table location %q is not an s3:// URL", location)
	}
	bucket, prefix := u.Host, strings.TrimPrefix(u.Path, "/")+"/_delta_log/"
	region := cfg["client.region"]
	if region == "" {
		region = cfg["s3.region"]
	}
	client := s3.New(s3.Options{
		Region:       region,
		Credentials:  credentials.NewStaticCredentialsProvider(cfg["s3.access-key-id"], cfg["s3.secret-access-key"], cfg["s3.session-token"]),
		UsePathStyle: strings.EqualFold(cfg["s3.path-style-access"], "true"),
		BaseEndpoint: func() *string {
			if e := cfg["s3.endpoint"]; e != "" {
				return aws.String(e)
			}
			return nil
		}(),
	})
	st := deltaLogState{version: -1}
	var newer []string
	p := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return st, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			name := path.Base(aws.ToString(o.Key))
			num, ok := strings.CutSuffix(name, ".json")
			if !ok || len(num) != 20 {
				continue
			}
			v, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				continue
			}
			st.version = max(st.version, v)
			if v > converted {
				newer = append(newer, aws.ToString(o.Key))
			}
		}
	}
	for _, key := range newer {
		n, err := commitRows(ctx, client, bucket, key)
		if err != nil {
			return st, err
		}
		st.rowsAfter += n
	}
	return st, nil
}

// commitRows sums stats.numRecords of the add actions of one commit.
func commitRows(ctx context.Context, client *s3.Client, bucket, key string) (int64, error) {
	obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return 0, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	defer obj.Body.Close()
	var n int64
	sc := bufio.NewScanner(obj.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var a struct {
			Add *struct {
				Stats string `json:"stats"`
			} `json:"add"`
		}
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			return 0, fmt.Errorf("s3://%s/%s: decode action: %w", bucket, key, err)
		}
		if a.Add == nil || a.Add.Stats == "" {
			continue
		}
		var s struct {
			NumRecords int64 `json:"numRecords"`
		}
		if err := json.Unmarshal([]byte(a.Add.Stats), &s); err != nil {
			return 0, fmt.Errorf("s3://%s/%s: decode add stats: %w", bucket, key, err)
		}
		n += s.NumRecords
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	return n, nil
}
