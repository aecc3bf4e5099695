package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/benthos-zerobus/benthos-zerobus/internal/emulator"
	"github.com/benthos-zerobus/benthos-zerobus/internal/healthhttp"
)

// The manifests under deploy/kubernetes, as far as this test reads them.
type (
	k8sObject struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"` // ConfigMap
		Spec yaml.Node         `yaml:"spec"`
	}
	deploymentSpec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	}
	k8sContainer struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		ReadinessProbe k8sProbe `yaml:"readinessProbe"`
		LivenessProbe  k8sProbe `yaml:"livenessProbe"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
		} `yaml:"volumeMounts"`
	}
	k8sProbe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"` // a name or a number
		} `yaml:"httpGet"`
	}
	hpaSpec struct {
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas int `yaml:"minReplicas"`
		MaxReplicas int `yaml:"maxReplicas"`
		Metrics     []struct {
			Type     string `yaml:"type"`
			Resource struct {
				Name string `yaml:"name"`
			} `yaml:"resource"`
		} `yaml:"metrics"`
	}
)

// readManifests parses every document of every file under
// deploy/kubernetes, keyed by kind.
func readManifests(t *testing.T) map[string]k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "kubernetes", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]k8sObject{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			require.NotEmpty(t, o.Kind, "%s: a document without a kind", f)
			require.NotContains(t, out, o.Kind, "%s: one %s only", f, o.Kind)
			out[o.Kind] = o
		}
	}
	return out
}

// TestKubernetesManifests checks deploy/kubernetes against what the binary
// serves: the Deployment runs the product image on the ConfigMap's config at
// the image's config path, its probes ask the Benthos HTTP server's port
// (the config's http.address) for /ready and the zerobus health endpoint,
// and the autoscaler scales that Deployment on CPU. Then it runs the built
// binary on the ConfigMap's config (the environment the Deployment sets
// pointed at an emulator, the server on a free loopback port) and asks both
// probe paths, and posts a row through the Service's path.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objs := readManifests(t)
	for _, kind := range []string{"Deployment", "ConfigMap", "HorizontalPodAutoscaler", "Service"} {
		require.Contains(t, objs, kind)
	}

	var dep deploymentSpec
	depObj, hpaObj := objs["Deployment"], objs["HorizontalPodAutoscaler"]
	require.NoError(t, depObj.Spec.Decode(&dep))
	assert.Equal(t, dep.Selector.MatchLabels, dep.Template.Metadata.Labels, "the selector matches the pods")
	require.Len(t, dep.Template.Spec.Containers, 1)
	c := dep.Template.Spec.Containers[0]
	assert.Contains(t, c.Image, "benthos-zerobus")
	assert.Equal(t, []string{"run", "/benthos.yaml"}, c.Args, "the Dockerfile's CMD")
	require.Len(t, c.Ports, 1)
	port := c.Ports[0]

	// The config comes from the ConfigMap, mounted at /benthos.yaml.
	require.Len(t, c.VolumeMounts, 1)
	mount := c.VolumeMounts[0]
	assert.Equal(t, "/benthos.yaml", mount.MountPath)
	require.Len(t, dep.Template.Spec.Volumes, 1)
	assert.Equal(t, mount.Name, dep.Template.Spec.Volumes[0].Name)
	assert.Equal(t, objs["ConfigMap"].Metadata.Name, dep.Template.Spec.Volumes[0].ConfigMap.Name)
	conf, ok := objs["ConfigMap"].Data[mount.SubPath]
	require.True(t, ok, "the ConfigMap holds %q", mount.SubPath)

	// The probes ask the config's HTTP server.
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(conf), &cfg))
	httpSection, _ := cfg["http"].(map[string]any)
	addr, _ := httpSection["address"].(string)
	_, cfgPort, err := net.SplitHostPort(addr)
	require.NoError(t, err, "http.address %q", addr)
	assert.Equal(t, cfgPort, strconv.Itoa(port.ContainerPort), "the container port is the config's http.address")
	probePort := func(p k8sProbe) string {
		switch v := p.HTTPGet.Port.(type) {
		case string:
			require.Equal(t, port.Name, v, "a probe names the container's port")
			return strconv.Itoa(port.ContainerPort)
		case int:
			return strconv.Itoa(v)
		}
		t.Fatalf("probe port %v", p.HTTPGet.Port)
		return ""
	}
	assert.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, cfgPort, probePort(c.ReadinessProbe))
	assert.Equal(t, healthhttp.Path, c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, cfgPort, probePort(c.LivenessProbe))

	var hpa hpaSpec
	require.NoError(t, hpaObj.Spec.Decode(&hpa))
	assert.Equal(t, "Deployment", hpa.ScaleTargetRef.Kind)
	assert.Equal(t, objs["Deployment"].Metadata.Name, hpa.ScaleTargetRef.Name)
	require.Len(t, hpa.Metrics, 1)
	assert.Equal(t, "cpu", hpa.Metrics[0].Resource.Name)
	assert.LessOrEqual(t, hpa.MinReplicas, hpa.MaxReplicas)
	out, _ := cfg["output"].(map[string]any)
	zb, _ := out["zerobus"].(map[string]any)
	streams, _ := zb["streams"].(map[string]any)
	streamsMax, _ := streams["max"].(int)
	require.Positive(t, streamsMax, "the config sets streams.max, the per-replica share of the table's budget")
	t.Logf("worst case: %d replicas × %d streams = %d streams to the table", hpa.MaxReplicas, streamsMax, hpa.MaxReplicas*streamsMax)

	// The binary on that config serves both probe paths.
	httpURL, grpcURL, _ := startEmulatorProcess(t, "--table", eventsTable+":"+eventsCols)
	local := freeAddr(t)
	httpSection["address"] = local
	b, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "benthos.yaml")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	env := []string{"DATABRICKS_CLIENT_ID=" + emulator.DefaultClientID, "DATABRICKS_CLIENT_SECRET=" + emulator.DefaultClientSecret}
	for _, e := range c.Env {
		v := e.Value
		switch e.Name {
		case "ZEROBUS_ENDPOINT":
			v = grpcURL
		case "DATABRICKS_HOST":
			v = httpURL
		case "ZEROBUS_TABLE":
			v = eventsTable
		}
		env = append(env, e.Name+"="+v)
	}
	p := start(t, env, append(c.Args[:0:0], "run", path)...)
	get := func(path string) (int, error) {
		resp, err := http.Get("http://" + local + path)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// The output connects (and registers its health) at the first write.
	eventually(t, 30*time.Second, 100*time.Millisecond, "the HTTP input answers", func() (bool, string) {
		resp, err := http.Post("http://"+local+"/post", "application/json", strings.NewReader(`{"id":1,"msg":"k8s"}`))
		if err != nil {
			return false, err.Error() + "\n" + p.out.String()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("POST /post: %d\n%s", resp.StatusCode, p.out.String())
	})
	for _, probe := range []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path} {
		eventually(t, 30*time.Second, 100*time.Millisecond, "probe "+probe+" answers 200", func() (bool, string) {
			code, err := get(probe)
			if err != nil {
				return false, err.Error()
			}
			return code == http.StatusOK, fmt.Sprintf("%d\n%s", code, p.out.String())
		})
	}
	eventually(t, 15*time.Second, 100*time.Millisecond, "the posted row lands", func() (bool, string) {
		info, err := fetchTableInfo(httpURL, eventsTable)
		if err != nil {
			return false, err.Error()
		}
		return info.RowCount >= 1, fmt.Sprintf("%+v", info)
	})
}

// TestKubernetesKafkaConfigMap checks deploy/kubernetes/kafka/configmap.yaml,
// the Kafka variant of the ConfigMap: it replaces the same ConfigMap (same
// name and key) with a redpanda input under a consumer group, and the built
// binary runs it, with the environment the Deployment sets (pointed at an
// emulator) and the brokers of a kfake cluster: both probe paths answer,
// every record lands with its coverage, and after SIGTERM the group's
// committed offsets are the end offsets.
func TestKubernetesKafkaConfigMap(t *testing.T) {
	t.Parallel()
	objs := readManifests(t)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "kubernetes", "kafka", "configmap.yaml"))
	require.NoError(t, err)
	var cm k8sObject
	require.NoError(t, yaml.Unmarshal(raw, &cm))
	assert.Equal(t, "ConfigMap", cm.Kind)
	assert.Equal(t, objs["ConfigMap"].Metadata.Name, cm.Metadata.Name, "the same ConfigMap, so applying it replaces the HTTP one")
	var dep deploymentSpec
	depObj := objs["Deployment"]
	require.NoError(t, depObj.Spec.Decode(&dep))
	c := dep.Template.Spec.Containers[0]
	conf, ok := cm.Data[c.VolumeMounts[0].SubPath]
	require.True(t, ok, "the Kafka ConfigMap holds %q, the key the Deployment mounts", c.VolumeMounts[0].SubPath)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(conf), &cfg))
	in, _ := cfg["input"].(map[string]any)
	rp, ok := in["redpanda"].(map[string]any)
	require.True(t, ok, "the input is redpanda: %v", in)
	require.NotEmpty(t, rp["consumer_group"], "replicas share one consumer group")
	httpSection, _ := cfg["http"].(map[string]any)
	_, cfgPort, err := net.SplitHostPort(fmt.Sprint(httpSection["address"]))
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(c.Ports[0].ContainerPort), cfgPort, "the container port is the config's http.address")

	const parts, n = 3, 3000
	srv := startEmulator(t, emulator.Faults{}, kafkaTable+":"+kafkaCols+", _zb_source STRING, _zb_offset BIGINT",
		kafkaTable+"_zb_coverage:writer_id STRING, source STRING, start BIGINT, end BIGINT, _zb_emit_ts TIMESTAMP")
	b := startKafkaBroker(t, kafkaTopic, parts)
	require.NoError(t, b.produce(kafkaTopic, parts, 0, n, func(i int) []byte { return kafkaValue(i, 100) }))

	local := freeAddr(t)
	httpSection["address"] = local
	out, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "benthos.yaml")
	require.NoError(t, os.WriteFile(path, out, 0o600))
	group := "k8s-kafka"
	env := []string{"DATABRICKS_CLIENT_ID=" + emulator.DefaultClientID, "DATABRICKS_CLIENT_SECRET=" + emulator.DefaultClientSecret,
		"KAFKA_BROKERS=" + b.addr, "KAFKA_TOPIC=" + kafkaTopic, "KAFKA_CONSUMER_GROUP=" + group}
	for _, e := range c.Env {
		v := e.Value
		switch e.Name {
		case "ZEROBUS_ENDPOINT":
			v = srv.GRPCURL()
		case "DATABRICKS_HOST":
			v = srv.HTTPURL()
		case "ZEROBUS_TABLE":
			v = kafkaTable
		}
		env = append(env, e.Name+"="+v)
	}
	p := start(t, env, append(c.Args[:0:0], "run", path)...)
	_, end, err := b.offsets(kafkaTopic, group)
	require.NoError(t, err)
	l := waitAllLanded(t, srv, kafkaTable, end, 60*time.Second, p.out.String)
	assert.Equal(t, n, l.distinct())
	for _, probe := range []string{c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path} {
		eventually(t, 30*time.Second, 100*time.Millisecond, "probe "+probe+" answers 200", func() (bool, string) {
			resp, err := http.Get("http://" + local + probe)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d\n%s", resp.StatusCode, tail(p.out.String(), 10))
		})
	}
	code, err := terminate(p, 60*time.Second)
	require.NoError(t, err)
	assert.Equal(t, 0, code, tail(p.out.String(), 20))
	committed, end, err := b.offsets(kafkaTopic, group)
	require.NoError(t, err)
	assert.Equal(t, end, committed, "after SIGTERM the group's committed offsets are the end offsets")
	cov, err := srv.TableRows(kafkaTable+"_zb_coverage", 0)
	require.NoError(t, err)
	assert.NotEmpty(t, cov, "coverage recorded")
}
