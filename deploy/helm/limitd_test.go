package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

const limitdChart = "limitd"

// ciValues are the values the chart is linted with: the two it needs.
func ciValues(t *testing.T) map[string]any {
	return readValues(t, filepath.Join(limitdChart, "ci", "test-values.yaml"))
}

// helm lint, as `helm lint --strict -f ci/test-values.yaml`: no error and
// no warning.
func TestLimitdChartLint(t *testing.T) {
	l := lint.All(limitdChart, ciValues(t), "limitd", false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", m)
		}
	}
}

// renderLimitd renders the chart with ci values and more, and checks every
// object: strictly decoded, then the rules the API server would apply.
func renderLimitd(t *testing.T, more string) []manifest {
	t.Helper()
	rendered, err := render(limitdChart, nil, merge(ciValues(t), parseValues(t, more)), "limitd")
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	ms, err := decodeAll(rendered)
	if err != nil {
		t.Fatalf("not valid Kubernetes objects:\n%v", err)
	}
	if err := check(ms); err != nil {
		t.Fatalf("rendered objects:\n%v", err)
	}
	return ms
}

func find[T any](t *testing.T, ms []manifest) *T {
	t.Helper()
	for _, m := range ms {
		if o, ok := m.obj.(*T); ok {
			return o
		}
	}
	t.Fatalf("no %T rendered (%v)", new(T), kinds(ms))
	return nil
}

func envByName(c corev1.Container) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	return env
}

func TestLimitdChartDefaults(t *testing.T) {
	ms := renderLimitd(t, "{}")
	if got := strings.Join(kinds(ms), " "); got != "ConfigMap Deployment PodDisruptionBudget Service" {
		t.Errorf("kinds %s; want no Secret (the admin token's is named) and no ServiceMonitor (off by default)", got)
	}
	dep := find[appsv1.Deployment](t, ms)
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if len(c.Args) != 1 || c.Args[0] != "serve" {
		t.Errorf("args %v, want serve", c.Args)
	}
	env := envByName(c)
	if env["LIMITD_REDIS_URL"].Value != "redis://redis:6379" {
		t.Errorf("LIMITD_REDIS_URL %+v, want the value redis.url", env["LIMITD_REDIS_URL"])
	}
	if ref := env["LIMITD_ADMIN_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "limitd-admin" || ref.SecretKeyRef.Key != "token" {
		t.Errorf("LIMITD_ADMIN_TOKEN %+v, want the Secret limitd-admin's key token", env["LIMITD_ADMIN_TOKEN"])
	}
	if _, on := env["LIMITD_GRPC_ADDR"]; on {
		t.Error("LIMITD_GRPC_ADDR set with grpc.enabled false")
	}
	if env["GOMEMLIMIT"].Value != "900MiB" {
		t.Errorf("GOMEMLIMIT %q, want goMemLimit, 90 %% of the memory limit", env["GOMEMLIMIT"].Value)
	}
	if env["LIMITD_ADDR"].Value != "0.0.0.0:8080" {
		t.Errorf("LIMITD_ADDR %q", env["LIMITD_ADDR"].Value)
	}
	// The boot file: LIMITD_CONFIG is the ConfigMap's key in the mounted
	// directory.
	cm := find[corev1.ConfigMap](t, ms)
	mounted := ""
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.SubPath == "" {
				mounted = m.MountPath
			}
		}
	}
	file := env["LIMITD_CONFIG"].Value
	if mounted == "" || filepath.Dir(file) != mounted || cm.Data[filepath.Base(file)] == "" {
		t.Errorf("LIMITD_CONFIG %s is not a key of ConfigMap %s mounted (as a directory) at %q", file, cm.Name, mounted)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.StrVal != "http" {
		t.Errorf("readinessProbe %+v, want GET /readyz on http", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != "http" {
		t.Errorf("livenessProbe %+v, want GET /healthz on http", p)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
		t.Errorf("pod securityContext %+v, want runAsNonRoot as 65532:65532, the image's user", pod.SecurityContext)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v", c.SecurityContext)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want a CPU request and a memory limit", c.Resources)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
	}
	pdb := find[policyv1.PodDisruptionBudget](t, ms)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
}

// Every option on: the Redis URL and the tokens from Secrets, the admin
// token kept in the chart's Secret, gRPC on its port, a ServiceMonitor
// that sends the metrics token.
func TestLimitdChartAllOptions(t *testing.T) {
	ms := renderLimitd(t, `
adminToken: {existingSecret: {name: ""}, value: s3cret}
redis: {url: "", existingSecret: {name: redis-url, key: url}}
token: {existingSecret: {name: limitd-token}}
metricsToken: {existingSecret: {name: limitd-metrics, key: t}}
grpc: {enabled: true}
serviceMonitor: {enabled: true, labels: {release: prom}}
replicaCount: 3
extraEnv: [{name: LIMITD_SHADOW_MODE, value: "true"}]
`)
	if got := strings.Join(kinds(ms), " "); got != "ConfigMap Deployment PodDisruptionBudget Secret Service ServiceMonitor" {
		t.Errorf("kinds %s", got)
	}
	dep := find[appsv1.Deployment](t, ms)
	env := envByName(dep.Spec.Template.Spec.Containers[0])
	secretRef := func(name string) string {
		if ref := env[name].ValueFrom; ref != nil && ref.SecretKeyRef != nil && env[name].Value == "" {
			return ref.SecretKeyRef.Name + "/" + ref.SecretKeyRef.Key
		}
		return fmt.Sprintf("%+v", env[name])
	}
	sec := find[corev1.Secret](t, ms)
	for name, want := range map[string]string{
		"LIMITD_REDIS_URL": "redis-url/url", "LIMITD_TOKEN": "limitd-token/token",
		"LIMITD_METRICS_TOKEN": "limitd-metrics/t", "LIMITD_ADMIN_TOKEN": sec.Name + "/token",
	} {
		if got := secretRef(name); got != want {
			t.Errorf("%s from %s, want the Secret key %s", name, got, want)
		}
	}
	if string(sec.Data["token"]) != "s3cret" {
		t.Errorf("the chart's Secret holds %q, want adminToken.value", sec.Data["token"])
	}
	if env["LIMITD_GRPC_ADDR"].Value != "0.0.0.0:8081" || env["LIMITD_SHADOW_MODE"].Value != "true" {
		t.Errorf("LIMITD_GRPC_ADDR %q, LIMITD_SHADOW_MODE %q", env["LIMITD_GRPC_ADDR"].Value, env["LIMITD_SHADOW_MODE"].Value)
	}
	svc := find[corev1.Service](t, ms)
	var grpc *corev1.ServicePort
	for i, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			grpc = &svc.Spec.Ports[i]
		}
	}
	if grpc == nil || grpc.Port != 8081 || grpc.AppProtocol == nil || *grpc.AppProtocol != "grpc" {
		t.Errorf("Service grpc port %+v, want 8081 with appProtocol grpc", grpc)
	}
	sm := find[monitoringv1.ServiceMonitor](t, ms)
	ep := sm.Spec.Endpoints[0]
	if ep.Path != "/metrics" || ep.Authorization == nil || ep.Authorization.Credentials == nil ||
		ep.Authorization.Credentials.Name != "limitd-metrics" || ep.Authorization.Credentials.Key != "t" {
		t.Errorf("ServiceMonitor endpoint %+v: want /metrics with the metrics token", ep)
	}
	if sm.Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor labels %v lack serviceMonitor.labels", sm.Labels)
	}
}

// Values that cannot run stop the render with a message naming them.
func TestLimitdChartRefuses(t *testing.T) {
	for _, c := range []struct {
		values, want string
	}{
		{`{}`, "adminToken.existingSecret.name"}, // the chart's defaults alone
		{`{adminToken: {value: x}}`, "with replicaCount above 1 set redis.url"},
		{`{adminToken: {value: x, existingSecret: {name: y}}, redis: {url: r}}`, "not both"},
		{`{adminToken: {value: x}, redis: {url: r, existingSecret: {name: s}}}`, "redis.url or redis.existingSecret.name, not both"},
	} {
		_, err := render(limitdChart, nil, parseValues(t, c.values), "limitd")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %s: %v; want an error naming %q", c.values, err, c.want)
		}
	}
	// One replica may run on the embedded Redis.
	ms := renderLimitd(t, `{redis: {url: ""}, replicaCount: 1}`)
	if _, set := envByName(find[appsv1.Deployment](t, ms).Spec.Template.Spec.Containers[0])["LIMITD_REDIS_URL"]; set {
		t.Error("LIMITD_REDIS_URL set with no Redis given")
	}
}

// check applies what the API server's validation would to the objects the
// chart makes (the part strict decoding cannot see): names, labels,
// selectors that select, ports and volumes that are named where used.
func check(ms []manifest) error {
	var errs []string
	bad := func(m manifest, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%s %s (%s): %s", m.kind, m.name, m.source, fmt.Sprintf(format, args...)))
	}
	var podLabels map[string]string
	podPorts := map[string]bool{}
	svcLabels := map[string]string{}
	svcPorts := map[string]bool{}
	for _, m := range ms {
		if m.name == "" {
			bad(m, "no metadata.name")
		}
		for _, e := range validation.IsDNS1123Subdomain(m.name) {
			bad(m, "name: %s", e)
		}
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			checkLabels(o.Labels, func(e string) { bad(m, "%s", e) })
			sel, err := labelSelector(o.Spec.Selector)
			podLabels = o.Spec.Template.Labels
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(podLabels)) {
				bad(m, "selector %v does not select its pods' labels %v (%v)", o.Spec.Selector, podLabels, err)
			}
			pod := o.Spec.Template.Spec
			volumes := map[string]bool{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = true
			}
			if len(pod.Containers) == 0 {
				bad(m, "no containers")
			}
			for _, c := range pod.Containers {
				for _, e := range validation.IsDNS1123Label(c.Name) {
					bad(m, "container name: %s", e)
				}
				if c.Image == "" {
					bad(m, "container %s: no image", c.Name)
				}
				for _, p := range c.Ports {
					if p.ContainerPort < 1 || p.ContainerPort > 65535 || len(validation.IsValidPortName(p.Name)) > 0 || podPorts[p.Name] {
						bad(m, "container port %+v: out of range, an invalid name or a name used twice", p)
					}
					podPorts[p.Name] = true
				}
				for _, e := range c.Env {
					if len(validation.IsEnvVarName(e.Name)) > 0 {
						bad(m, "env name %q", e.Name)
					}
					if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && (r.SecretKeyRef.Name == "" || r.SecretKeyRef.Key == "") {
						bad(m, "env %s: a secretKeyRef without name or key", e.Name)
					}
				}
				for _, vm := range c.VolumeMounts {
					if !volumes[vm.Name] {
						bad(m, "volumeMount %s: no such volume", vm.Name)
					}
				}
				for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
					if p != nil && p.HTTPGet != nil && p.HTTPGet.Port.StrVal != "" && !podPorts[p.HTTPGet.Port.StrVal] {
						bad(m, "probe on port %q, which the container does not name", p.HTTPGet.Port.StrVal)
					}
				}
			}
		case *corev1.Service:
			svcLabels = o.Labels
			if len(o.Spec.Ports) == 0 {
				bad(m, "no ports")
			}
			for _, p := range o.Spec.Ports {
				svcPorts[p.Name] = true
				if p.Port < 1 || p.Port > 65535 {
					bad(m, "port %d", p.Port)
				}
			}
		}
	}
	// Selectors against what they should select, once every object is seen.
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *corev1.Service:
			if len(o.Spec.Selector) == 0 || !labels.SelectorFromSet(o.Spec.Selector).Matches(labels.Set(podLabels)) {
				bad(m, "selector %v does not select the Deployment's pods %v", o.Spec.Selector, podLabels)
			}
			for _, p := range o.Spec.Ports {
				if p.TargetPort.StrVal != "" && !podPorts[p.TargetPort.StrVal] {
					bad(m, "targetPort %q: no container port of that name", p.TargetPort.StrVal)
				}
			}
		case *policyv1.PodDisruptionBudget:
			sel, err := labelSelector(o.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(podLabels)) {
				bad(m, "selector %v does not select the Deployment's pods", o.Spec.Selector)
			}
			if (o.Spec.MaxUnavailable == nil) == (o.Spec.MinAvailable == nil) {
				bad(m, "want exactly one of minAvailable and maxUnavailable")
			}
		case *monitoringv1.ServiceMonitor:
			sel, err := labelSelector(&o.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(svcLabels)) {
				bad(m, "selector %v does not select the Service %v", o.Spec.Selector, svcLabels)
			}
			for _, ep := range o.Spec.Endpoints {
				if !svcPorts[ep.Port] {
					bad(m, "endpoint port %q: not a port of the Service", ep.Port)
				}
			}
		}
		if o, ok := m.obj.(interface{ GetLabels() map[string]string }); ok {
			checkLabels(o.GetLabels(), func(e string) { bad(m, "%s", e) })
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func labelSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Nothing(), fmt.Errorf("no selector")
	}
	return metav1.LabelSelectorAsSelector(s)
}

func checkLabels(l map[string]string, bad func(string)) {
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			bad(fmt.Sprintf("label %s: %s", k, e))
		}
		for _, e := range validation.IsValidLabelValue(v) {
			bad(fmt.Sprintf("label %s=%s: %s", k, v, e))
		}
	}
}

// docs/kubernetes.md's helm install: the values it sets, the boot file
// deploy/limitd.yaml given with --set-file.
func TestLimitdChartDocsInstall(t *testing.T) {
	config, err := os.ReadFile(filepath.Join("..", "limitd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vals := parseValues(t, `{adminToken: {existingSecret: {name: limitd-admin}}, redis: {url: "redis://redis:6379"}, grpc: {enabled: true}}`)
	vals["config"] = string(config)
	rendered, err := render(limitdChart, nil, vals, "default")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := decodeAll(rendered)
	if err == nil {
		err = check(ms)
	}
	if err != nil {
		t.Fatal(err)
	}
	// As it is, but for the final newline, which the YAML block drops.
	if cm := find[corev1.ConfigMap](t, ms); cm.Data["limitd.yaml"] != strings.TrimSuffix(string(config), "\n") {
		t.Errorf("the ConfigMap holds %q, want deploy/limitd.yaml as it is", cm.Data["limitd.yaml"])
	}
}
