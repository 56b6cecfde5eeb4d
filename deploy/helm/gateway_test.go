package helm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// gatewayValues is the values file for Envoy Gateway's chart.
var gatewayValues = filepath.Join("..", "envoy-gateway", "values.yaml")

// gatewayChart is Envoy Gateway's chart, gateway-helm, as released at the
// version of github.com/envoyproxy/gateway this module requires: the Go
// module holds the chart's sources (checked against the checksum
// database like any module), and values.yaml is generated from
// values.tmpl.yaml as Envoy Gateway's `make helm-generate` does for a
// release. LIMITD_GATEWAY_HELM_CHART names another chart directory, with
// its values.yaml, to check the file against.
func gatewayChart(t *testing.T) (dir, image string) {
	t.Helper()
	if d := os.Getenv("LIMITD_GATEWAY_HELM_CHART"); d != "" {
		return d, ""
	}
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/envoyproxy/gateway")
	out, err := cmd.Output()
	var mod struct{ Dir, Version, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" || mod.Dir == "" {
		t.Fatalf("go mod download github.com/envoyproxy/gateway: %v %v %s", err, jerr, mod.Error)
	}
	dir = filepath.Join(t.TempDir(), "gateway-helm")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(mod.Dir, "charts", "gateway-helm"))); err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, "values.tmpl.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	image = "docker.io/envoyproxy/gateway:" + mod.Version
	values := strings.NewReplacer("${GatewayImage}", image, "${GatewayImagePullPolicy}", "IfNotPresent").Replace(string(tmpl))
	if strings.Contains(values, "${") {
		t.Fatalf("values.tmpl.yaml of %s has variables the release's generation does not set", mod.Version)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "values.yaml"), values)
	return dir, image
}

// keyPaths lists the paths of a values tree, maps only (a list is a leaf).
func keyPaths(v any, prefix string, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, sub := range m {
		p := strings.TrimPrefix(prefix+"."+k, ".")
		*out = append(*out, p)
		keyPaths(sub, p, out)
	}
}

// envoyGatewayConfig renders the chart and decodes the EnvoyGateway
// configuration its ConfigMap carries, strictly: a key the EnvoyGateway
// type does not have is an error, not a setting Envoy Gateway ignores.
func envoyGatewayConfig(t *testing.T, dir string, vals map[string]any) (*egv1a1.EnvoyGateway, []manifest) {
	t.Helper()
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := render(dir, ch, vals, "envoy-gateway-system")
	if err != nil {
		t.Fatalf("render %s: %v", ch.Metadata.Name, err)
	}
	src := rendered["gateway-helm/templates/envoy-gateway-config.yaml"]
	ms, err := decodeAll(map[string]string{"envoy-gateway-config.yaml": src})
	if err != nil || len(ms) != 1 {
		t.Fatalf("envoy-gateway-config.yaml: %v, %d objects", err, len(ms))
	}
	cm := ms[0].obj.(*corev1.ConfigMap)
	var eg egv1a1.EnvoyGateway
	if err := yaml.UnmarshalStrict([]byte(cm.Data["envoy-gateway.yaml"]), &eg); err != nil {
		t.Fatalf("the EnvoyGateway configuration rendered with %s: %v\n%s", gatewayValues, err, cm.Data["envoy-gateway.yaml"])
	}
	return &eg, ms
}

// deploy/envoy-gateway/values.yaml sets only keys the chart has, and the
// configuration the chart renders with it is Envoy Gateway's own with
// limitd's image and a Redis: the shutdown manager's image and the metrics
// port as the chart has them.
func TestEnvoyGatewayValues(t *testing.T) {
	dir, egImage := gatewayChart(t)
	chartVals := readValues(t, filepath.Join(dir, "values.yaml"))
	ours := readValues(t, gatewayValues)

	// Keys: every path but those inside config.envoyGateway (the
	// EnvoyGateway configuration, free-form in the chart, checked by the
	// strict decode below) is a path of the chart's values.yaml.
	var paths []string
	keyPaths(map[string]any(ours), "", &paths)
	sort.Strings(paths)
	for _, p := range paths {
		if strings.HasPrefix(p, "config.envoyGateway.") {
			continue
		}
		var v any = map[string]any(chartVals)
		for _, k := range strings.Split(p, ".") {
			m, _ := v.(map[string]any)
			var ok bool
			if v, ok = m[k]; !ok {
				t.Errorf("%s: %s is not a key of the chart's values.yaml", gatewayValues, p)
				break
			}
		}
	}

	eg, _ := envoyGatewayConfig(t, dir, ours)
	def, _ := envoyGatewayConfig(t, dir, map[string]any{})
	k := eg.Provider.Kubernetes
	wantImage := ours["global"].(map[string]any)["images"].(map[string]any)["ratelimit"].(map[string]any)["image"]
	if k == nil || k.RateLimitDeployment == nil || k.RateLimitDeployment.Container == nil ||
		k.RateLimitDeployment.Container.Image == nil || *k.RateLimitDeployment.Container.Image != wantImage {
		t.Fatalf("rateLimitDeployment: %+v; want the image %v", k, wantImage)
	}
	if r := k.RateLimitDeployment.Replicas; r == nil || *r != 2 {
		t.Errorf("rateLimitDeployment.replicas %v, want 2", r)
	}
	if egImage != "" && (k.ShutdownManager == nil || k.ShutdownManager.Image == nil || *k.ShutdownManager.Image != egImage) {
		t.Errorf("shutdownManager %+v, want the chart's %s", k.ShutdownManager, egImage)
	}
	rl := eg.RateLimit
	if rl == nil || rl.Backend.Type != egv1a1.RedisBackendType || rl.Backend.Redis == nil || rl.Backend.Redis.URL == nil || *rl.Backend.Redis.URL == "" {
		t.Fatalf("rateLimit %+v: want a Redis backend with a url", rl)
	}
	if rl.Telemetry != nil && rl.Telemetry.Metrics != nil && rl.Telemetry.Metrics.Prometheus != nil && rl.Telemetry.Metrics.Prometheus.Disable {
		t.Error("rateLimit.telemetry.metrics.prometheus.disable: Envoy Gateway would give the container no metrics port")
	}
	// Everything else is the chart's default: the values add, they replace
	// nothing.
	withoutOurs := func(e *egv1a1.EnvoyGateway) egv1a1.EnvoyGateway {
		c := *e.DeepCopy()
		c.RateLimit = nil
		c.Provider.Kubernetes.RateLimitDeployment.Container.Image = nil
		c.Provider.Kubernetes.RateLimitDeployment.Replicas = nil
		return c
	}
	if a, b := withoutOurs(eg), withoutOurs(def); !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		t.Errorf("the values change more than the rate limit's image, replicas and backend:\n ours    %s\n default %s", ja, jb)
	}
}
