// Package helm holds no code: its tests lint and render deploy/helm/limitd
// and render Envoy Gateway's chart with deploy/envoy-gateway/values.yaml,
// in a module of their own so that the main module does not build Helm.
package helm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifest is one object a chart rendered: where it came from, and the
// object decoded strictly into its Kubernetes type.
type manifest struct {
	source, kind, name string
	obj                any
}

// render renders a chart as `helm install --dry-run` would for a release
// "limitd" in namespace ns, values given over the chart's.
func render(dir string, ch *chart.Chart, vals map[string]any, ns string) (map[string]string, error) {
	if ch == nil {
		var err error
		if ch, err = loader.Load(dir); err != nil {
			return nil, err
		}
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "limitd", Namespace: ns, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// newObject is the Kubernetes type each apiVersion/kind decodes into. A
// kind not here is an error: every object a chart renders is checked.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	}
	return nil, fmt.Errorf("apiVersion %q kind %q: no schema to check it against", apiVersion, kind)
}

// decodeAll splits rendered templates into documents and decodes each
// strictly: a field its type does not have, a duplicate key or a value of
// the wrong type is an error naming the template.
func decodeAll(rendered map[string]string) ([]manifest, error) {
	names := make([]string, 0, len(rendered))
	for n := range rendered {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []manifest
	var errs []error
	for _, src := range names {
		if strings.HasSuffix(src, "NOTES.txt") {
			continue
		}
		docs := releaseutil.SplitManifests(rendered[src])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			doc := bytes.NewBufferString(docs[k])
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc.Bytes(), &meta); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", src, err))
				continue
			}
			if meta.Kind == "" && meta.APIVersion == "" {
				continue // an empty document: a template whose condition is off
			}
			obj, err := newObject(meta.APIVersion, meta.Kind)
			if err == nil {
				err = yaml.UnmarshalStrict(doc.Bytes(), obj)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %s: %w", src, meta.Kind, meta.Metadata.Name, err))
				continue
			}
			out = append(out, manifest{source: src, kind: meta.Kind, name: meta.Metadata.Name, obj: obj})
		}
	}
	return out, errors.Join(errs...)
}

// readValues reads a values file as Helm does.
func readValues(t *testing.T, path string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// merge lays the values of over onto base, as -f files do in order.
func merge(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// parseValues reads values written inline in a test.
func parseValues(t *testing.T, src string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func kinds(ms []manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.kind)
	}
	slices.Sort(out)
	return out
}
