package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp/healthhttptest"
)

// TestSchemaRegistryOutageHoldsBatchesAndHeals runs the binaries: Avro
// records in the wire format wait in a topic (the emulator's --kafka),
// their schema in a registry served by a second emulator process
// (--schema-registry). With that registry stopped, the product binary
// (redpanda → schema_registry_decode → zerobus) lands nothing and
// dead-letters nothing, and /zerobus/health names the processor's fault;
// the registry is started again on the same port, its schemas read back
// from --data, and every record lands without a restart of the pipeline.
func TestSchemaRegistryOutageHoldsBatchesAndHeals(t *testing.T) {
	t.Parallel()
	const (
		n     = 300
		table = "main.default.sr_outage"
		dlq   = "main.default.sr_outage_dead_letter"
	)
	vars, _ := startEmulatorProcessVars(t, "--kafka", "127.0.0.1:0", "--kafka-topic", "readings:3")
	brokers, httpURL := vars["KAFKA_BROKERS"], vars["DATABRICKS_HOST"]
	regAddr, regData := freeAddr(t), t.TempDir()
	regURL := "http://" + regAddr
	startRegistry := func() *proc {
		p := startBinary(t, emulatorBinary(t), nil, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--s3", "127.0.0.1:0",
			"--data", regData, "--log-level", "warn", "--schema-registry", regAddr)
		eventually(t, 30*time.Second, 20*time.Millisecond, "the registry answers", func() (bool, string) {
			resp, err := http.Get(regURL + "/subjects")
			if err != nil {
				return false, err.Error() + p.out.String()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
		return p
	}
	reg := startRegistry()
	out, err := exec.Command(emulatorBinary(t), "avro-produce", "--brokers", brokers, "--registry", regURL, "--topic", "readings", "--count", fmt.Sprint(n)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("produced %d Avro records", n))
	code, err := terminate(reg, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, code, reg.out.String())

	metrics := freeAddr(t)
	config := filepath.Join(t.TempDir(), "avro.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
input:
  redpanda:
    seed_brokers: [ %q ]
    topics: [ readings ]
    consumer_group: sr-outage
    start_offset: earliest
    commit_period: 1s
pipeline:
  processors:
    - schema_registry_decode:
        url: %s
        avro:
          preserve_logical_types: true
          raw_unions: true
output:
  zerobus:
    endpoint: %s
    workspace_url: %s
    table: %s
    client_id: emulator
    client_secret: emulator-secret
    catalog:
      provision: true
      warehouse_id: emulator-warehouse
    dead_letter:
      table: %s
http:
  address: %s
logger:
  level: INFO
`, brokers, regURL, vars["ZEROBUS_ENDPOINT"], httpURL, table, dlq, metrics)), 0o644))
	p := start(t, nil, "run", config)

	healthURL := "http://" + metrics + healthhttp.Path
	var problem string
	eventually(t, 60*time.Second, 100*time.Millisecond, "the health endpoint names the registry fault", func() (bool, string) {
		_, rep, err := healthhttptest.Fetch(healthURL)
		if err != nil {
			return false, err.Error() + "\n" + tail(p.out.String(), 20)
		}
		for _, pr := range rep.Processors {
			if pr.Type == "schema_registry_decode" && pr.Status != healthhttp.StatusUp && len(pr.Problems) > 0 {
				problem = pr.Problems[0]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", rep.Processors)
	})
	assert.Contains(t, problem, "schema registry "+regURL+" unreachable")
	assert.Contains(t, problem, "check that the registry is up")
	time.Sleep(2 * time.Second)
	if ti, err := fetchTableInfo(httpURL, table); err == nil {
		assert.Zero(t, ti.RowCount, "nothing lands while the registry is down")
	}
	if di, err := fetchTableInfo(httpURL, dlq); err == nil {
		assert.Zero(t, di.RowCount, "nothing is dead-lettered for a registry fault")
	}
	logs := p.out.String()
	assert.Equal(t, 1, strings.Count(logs, "The batch is held"), "the fault is explained once:\n%s", tail(logs, 20))

	downFor := time.Now()
	startRegistry()
	eventually(t, 90*time.Second, 200*time.Millisecond, "every record lands once the registry is back", func() (bool, string) {
		ti, err := fetchTableInfo(httpURL, table)
		if err != nil {
			return false, err.Error() + "\n" + tail(p.out.String(), 20)
		}
		return ti.RowCount >= n, fmt.Sprintf("%d rows\n%s", ti.RowCount, tail(p.out.String(), 20))
	})
	healed := time.Since(downFor)
	_, rep := healthhttptest.Get(t, healthURL)
	for _, pr := range rep.Processors {
		assert.Equal(t, healthhttp.StatusUp, pr.Status, "%+v", pr)
	}
	assert.Contains(t, p.out.String(), "answers again after")
	ids := map[float64]bool{}
	for _, r := range readRows(t, httpURL, table) {
		ids[r["id"].(float64)] = true
	}
	assert.Len(t, ids, n, "every record once")
	if di, err := fetchTableInfo(httpURL, dlq); err == nil {
		assert.Zero(t, di.RowCount, "nothing dead-lettered")
	}
	code, err = terminate(p, 60*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 0, code, tail(p.out.String(), 30))
	faultLine(t, "schema registry down at the start (%d Avro records waiting): nothing landed or dead-lettered, health named it; registry back on the same port with its schemas: all %d landed %s later, no restart",
		n, n, healed.Round(100*time.Millisecond))
}

// TestDemoAvroScript runs scripts/demo.sh avro (make demo-avro): the
// emulator with a broker and a registry, avro-produce, and
// config/examples/avro.yaml until the records have landed; the table it
// prints has the registry's types. (avro.yaml's catalog.schema_metadata is
// the zerobus output's.)
func TestDemoAvroScript(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "demo.sh"), "avro", binary(t), emulatorBinary(t))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "LOG_LEVEL=WARN", "DEMO_AVRO_COUNT=300", "DEMO_METRICS_ADDR="+freeAddr(t))
	cmd.WaitDelay = 5 * time.Second
	timer := time.AfterFunc(150*time.Second, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make demo-avro:\n%s", out)
	for _, want := range []string{
		"Schema Registry http://127.0.0.1:", "registered readings-value as schema id 1; produced 300 Avro records",
		`"row_count":300`,
		"  reading_time timestamp nullable=false", "  day date nullable=false", "  price decimal(10,2) nullable=false",
		"  status string nullable=false", "  tags array<string> nullable=false", "  note string nullable=true",
	} {
		assert.Contains(t, string(out), want)
	}
}
