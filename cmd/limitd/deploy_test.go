package main

import (
	"bufio"
	"context"
	"fmt"
	"github.com/alicebob/miniredis/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/internal/boot"
	"github.com/limitd/limitd/internal/refenv"
)

// yamlDocs parses every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if err.Error() == "EOF" {
				return docs
			}
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
}

// at walks a parsed YAML document: keys of mappings, indexes of lists.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// composeImage is the image docker-compose.yml builds: the examples run it.
func composeImage(t *testing.T) string {
	t.Helper()
	docs := yamlDocs(t, filepath.Join(moduleRoot, "docker-compose.yml"))
	img, _ := at(docs[0], "services", "limitd", "image").(string)
	if img == "" {
		t.Fatal("docker-compose.yml: services.limitd.image is not set")
	}
	return img
}

// envOf reads a container's env list as a map, checking that limitd reads
// each variable: one of the reference's or a LIMITD_* one.
func envOf(t *testing.T, where string, list any) map[string]string {
	t.Helper()
	known := map[string]bool{}
	for _, f := range configFields() {
		known[f.Tag.Get("env")] = true
	}
	env := map[string]string{}
	items, _ := list.([]any)
	for _, it := range items {
		name, _ := at(it, "name").(string)
		value, _ := at(it, "value").(string)
		if !known[name] && !refenv.Known(name) {
			t.Errorf("%s: env %s is read neither by limitd nor by the reference", where, name)
		}
		env[name] = value
	}
	return env
}

// deploy/ratelimit/ is the reference's usual layout with limitd's image:
// the container started as /bin/ratelimit, its variables ones limitd
// honours, the ConfigMap of rules mounted where they say the runtime
// directory is, and its files rules limitd loads.
func TestDeployRatelimitManifest(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(moduleRoot, "deploy", "ratelimit", "ratelimit.yaml"))
	var kinds []string
	byName := map[string]map[string]any{}
	for _, d := range docs {
		kind, _ := d["kind"].(string)
		name, _ := at(d, "metadata", "name").(string)
		kinds = append(kinds, kind)
		byName[kind+"/"+name] = d
	}
	if got := strings.Join(kinds, " "); got != "ConfigMap Deployment Service Deployment Service" {
		t.Errorf("kinds %s", got)
	}
	dep := byName["Deployment/ratelimit"]
	c := at(dep, "spec", "template", "spec", "containers", 0)
	if img := at(c, "image"); img != composeImage(t) {
		t.Errorf("image %v, want %s, the image docker-compose.yml builds", img, composeImage(t))
	}
	if cmd := at(c, "command"); !slices.Equal(toStrings(cmd), []string{refCommand}) {
		t.Errorf("command %v, want %s", cmd, refCommand)
	}
	env := envOf(t, "Deployment/ratelimit", at(c, "env"))
	if notices, err := refenv.Check(env); err != nil || len(notices) > 0 {
		t.Errorf("its variables: %v, ignored %v; want none ignored or refused", err, notices)
	}
	_, rm, err := ratelimitEnv(env)
	if err != nil {
		t.Fatalf("limitd ratelimit refuses its environment: %v", err)
	}
	// It starts under runAsNonRoot as the image's user.
	uid, gid := imageUser(t)
	pod := at(dep, "spec", "template", "spec", "securityContext")
	if at(pod, "runAsNonRoot") != true || at(c, "securityContext", "runAsNonRoot") != true {
		t.Errorf("runAsNonRoot: pod %v, container %v; want true", at(pod, "runAsNonRoot"), at(c, "securityContext", "runAsNonRoot"))
	}
	if at(pod, "runAsUser") != uid || at(pod, "runAsGroup") != gid {
		t.Errorf("runs as %v:%v, the image's USER is %d:%d", at(pod, "runAsUser"), at(pod, "runAsGroup"), uid, gid)
	}
	mount := at(c, "volumeMounts", 0)
	if at(mount, "mountPath") != rm.Dir.Dir {
		t.Errorf("the rules are mounted at %v, the runtime directory is %s", at(mount, "mountPath"), rm.Dir.Dir)
	}
	vol := at(dep, "spec", "template", "spec", "volumes", 0)
	if at(vol, "name") != at(mount, "name") || at(vol, "configMap", "name") != "ratelimit-config" {
		t.Errorf("volume %v does not mount the ConfigMap ratelimit-config", vol)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if at(c, probe, "httpGet", "path") != "/healthcheck" || at(c, probe, "httpGet", "port") != int(rm.Settings.Port) {
			t.Errorf("%s %v, want GET /healthcheck on PORT %d", probe, at(c, probe), rm.Settings.Port)
		}
	}
	ports := map[string]int{}
	for _, p := range at(c, "ports").([]any) {
		ports[at(p, "name").(string)] = at(p, "containerPort").(int)
	}
	if ports["grpc"] != int(rm.Settings.GRPCPort) || ports["http"] != int(rm.Settings.Port) || ports["metrics"] != 9090 || rm.Settings.PrometheusAddr != ":9090" {
		t.Errorf("ports %v do not match GRPC_PORT, PORT and PROMETHEUS_ADDR", ports)
	}
	// The ConfigMap's files are rules limitd loads.
	dir := t.TempDir()
	data, _ := at(byName["ConfigMap/ratelimit-config"], "data").(map[string]any)
	for name, content := range data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content.(string)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := boot.LoadDir(boot.DirSource{Dir: dir, IgnoreDotFiles: true})
	if err != nil || f.Rules.Domains() != 2 || f.Rules.Len() != 4 {
		t.Errorf("the ConfigMap's rules: %v; want 2 domains, 4 rules", err)
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, s := range l {
		out[i], _ = s.(string)
	}
	return out
}

// envoyGatewayEnv is the environment Envoy Gateway (v1.9.1,
// internal/infrastructure/kubernetes/ratelimit) gives its envoy-ratelimit
// container by default: Redis as the backend, its Prometheus metrics on.
var envoyGatewayEnv = map[string]string{
	"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
	"LOG_LEVEL": "info", "USE_STATSD": "false", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
	"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
	"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis-system.svc.cluster.local:6379",
	"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
}

// deploy/envoy-gateway/values.yaml gives Envoy Gateway's chart limitd's
// image and a Redis; limitd takes the environment Envoy Gateway then gives
// the container, and names what it ignores. (deploy/helm's tests render
// the chart itself with the file.)
func TestDeployEnvoyGatewayValues(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(moduleRoot, "deploy", "envoy-gateway", "values.yaml"))
	if len(docs) != 1 {
		t.Fatalf("want one document, got %d", len(docs))
	}
	v := docs[0]
	// The chart reads registry/repository:tag: docker.io/library/ is the
	// name Docker and kind give an image built as limitd:dev.
	if img := at(v, "global", "images", "ratelimit", "image"); img != "docker.io/library/"+composeImage(t) {
		t.Errorf("global.images.ratelimit.image %v, want the image docker-compose.yml builds, %s, fully named", img, composeImage(t))
	}
	eg := at(v, "config", "envoyGateway")
	url, _ := at(eg, "rateLimit", "backend", "redis", "url").(string)
	if at(eg, "rateLimit", "backend", "type") != "Redis" || url == "" {
		t.Errorf("rateLimit.backend: %v", at(eg, "rateLimit", "backend"))
	}
	if at(eg, "rateLimit", "telemetry") != nil {
		t.Error("rateLimit.telemetry set: Envoy Gateway's default (USE_PROMETHEUS on :19001, its metrics port open) is what limitd serves")
	}
	all := map[string]string{}
	for k, v := range envoyGatewayEnv {
		all[k] = v
	}
	all["REDIS_URL"] = url
	for k, v := range envOf(t, "rateLimitDeployment", at(eg, "provider", "kubernetes", "rateLimitDeployment", "container", "env")) {
		all[k] = v
	}
	notices, err := refenv.Check(all)
	if err != nil {
		t.Fatalf("limitd refuses Envoy Gateway's environment: %v", err)
	}
	var ignored []string
	for _, n := range notices {
		name, _, _ := strings.Cut(n, ":")
		ignored = append(ignored, name)
	}
	slices.Sort(ignored)
	if got := strings.Join(ignored, " "); got != "GRPC_SERVER_TLS_CA_CERT PROMETHEUS_MAPPER_YAML" {
		t.Errorf("ignored %v; want GRPC_SERVER_TLS_CA_CERT and PROMETHEUS_MAPPER_YAML alone", notices)
	}
}

// deploy/helm/limitd (rendered and validated by deploy/helm's own tests)
// against what limitd reads: the variables its templates set, its default
// boot file, the image and its user.
func TestDeployHelmChart(t *testing.T) {
	dir := filepath.Join(moduleRoot, "deploy", "helm", "limitd")
	known := map[string]bool{}
	for _, f := range configFields() {
		known[f.Tag.Get("env")] = true
	}
	templates, err := filepath.Glob(filepath.Join(dir, "templates", "*.yaml"))
	if err != nil || len(templates) == 0 {
		t.Fatalf("no templates in %s: %v", dir, err)
	}
	set := map[string]bool{}
	for _, path := range templates {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`- name: (LIMITD_\w+)`).FindAllStringSubmatch(string(b), -1) {
			set[m[1]] = true
			if !known[m[1]] {
				t.Errorf("%s sets %s, which limitd serve does not read", filepath.Base(path), m[1])
			}
		}
	}
	for _, name := range []string{"LIMITD_ADDR", "LIMITD_CONFIG", "LIMITD_REDIS_URL", "LIMITD_ADMIN_TOKEN", "LIMITD_GRPC_ADDR"} {
		if !set[name] {
			t.Errorf("the chart never sets %s", name)
		}
	}
	v := yamlDocs(t, filepath.Join(dir, "values.yaml"))[0]
	if img := fmt.Sprintf("%v:%v", at(v, "image", "repository"), at(v, "image", "tag")); img != composeImage(t) {
		t.Errorf("image %s, want %s, the image docker-compose.yml builds", img, composeImage(t))
	}
	uid, gid := imageUser(t)
	if at(v, "podSecurityContext", "runAsNonRoot") != true || at(v, "podSecurityContext", "runAsUser") != uid || at(v, "podSecurityContext", "runAsGroup") != gid {
		t.Errorf("podSecurityContext %v, want runAsNonRoot as the image's user %d:%d", at(v, "podSecurityContext"), uid, gid)
	}
	config, _ := at(v, "config").(string)
	if _, err := boot.Parse("values.yaml config", []byte(config)); err != nil {
		t.Errorf("the chart's default boot file: %v", err)
	}
}

// dockerStage is one stage of the Dockerfile: its base, its name and its
// instructions in order (continuation lines joined).
type dockerStage struct {
	from, name string
	instrs     [][2]string // instruction (upper case), its arguments
}

func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") && line == "" {
			continue
		}
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			line += cont
			continue
		}
		line += l
		op, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		line = ""
		op = strings.ToUpper(op)
		switch {
		case op == "":
		case op == "FROM":
			f := strings.Fields(args)
			st := dockerStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			if op != "ARG" {
				t.Fatalf("Dockerfile: %s before FROM", op)
			}
		default:
			st := &stages[len(stages)-1]
			st.instrs = append(st.instrs, [2]string{op, strings.TrimSpace(args)})
		}
	}
	return stages
}

// last returns the arguments of a stage's last instruction op, "" if none.
func (s dockerStage) last(op string) string {
	out := ""
	for _, in := range s.instrs {
		if in[0] == op {
			out = in[1]
		}
	}
	return out
}

// imageUser is the Dockerfile's final USER as uid and gid: numbers, so that
// the kubelet can check runAsNonRoot against them.
func imageUser(t *testing.T) (uid, gid int) {
	t.Helper()
	stages := readDockerfile(t)
	user := stages[len(stages)-1].last("USER")
	m := regexp.MustCompile(`^(\d+):(\d+)$`).FindStringSubmatch(user)
	if m == nil {
		t.Fatalf("Dockerfile: USER %q is not numeric uid:gid; with runAsNonRoot the kubelet refuses a user name", user)
	}
	uid, _ = strconv.Atoi(m[1])
	gid, _ = strconv.Atoi(m[2])
	return uid, gid
}

// The image starts under runAsNonRoot and on every builder: both bases
// pinned, a numeric unprivileged USER, nothing copied through the base's
// /bin link, and /bin/ratelimit, the command Envoy Gateway gives its rate
// limit container, a link to the binary the entrypoint names.
func TestDockerfileImage(t *testing.T) {
	stages := readDockerfile(t)
	if len(stages) != 2 || stages[0].name != "build" {
		t.Fatalf("want a build stage and the runtime stage, got %d stages", len(stages))
	}
	digest := regexp.MustCompile(`^[a-z0-9./-]+:[a-z0-9.-]+@sha256:[0-9a-f]{64}$`)
	exactTag := regexp.MustCompile(`^[a-z0-9./-]+:\d+\.\d+\.\d+(-[a-z0-9]+)?$`) // golang:1.26.8-trixie
	for _, st := range stages {
		if !digest.MatchString(st.from) && !exactTag.MatchString(st.from) {
			t.Errorf("FROM %s is neither pinned by digest nor an exact version tag", st.from)
		}
	}
	run := stages[len(stages)-1]
	// The runtime base is Debian 13's, where /usr is merged: /bin is a link
	// to usr/bin, so /bin/x is /usr/bin/x.
	if !strings.Contains(run.from, "-debian13") {
		t.Errorf("runtime base %s: the layout below assumes Debian 13's merged /usr (/bin a link to usr/bin)", run.from)
	}
	if uid, gid := imageUser(t); uid != 65532 || gid != 65532 {
		t.Errorf("USER %d:%d, want 65532:65532, distroless's nonroot", uid, gid)
	}

	// Where the build stage puts the binary and the link, in the image.
	build := stages[0]
	var binary, link, target string
	for _, in := range build.instrs {
		if in[0] != "RUN" {
			continue
		}
		if m := regexp.MustCompile(`go build .* -o /out(/\S+) \./cmd/limitd$`).FindStringSubmatch(in[1]); m != nil {
			binary = m[1]
		}
		if m := regexp.MustCompile(`ln -s (\S+) /out(/\S+)$`).FindStringSubmatch(in[1]); m != nil {
			target, link = m[1], m[2]
		}
	}
	var copies []string
	for _, in := range run.instrs {
		if in[0] != "COPY" {
			continue
		}
		f := strings.Fields(in[1])
		src, dst := f[len(f)-2], f[len(f)-1]
		if f[0] != "--from=build" || !strings.HasPrefix(src, "/out/") || strings.TrimPrefix(src, "/out") != dst {
			t.Errorf("COPY %s: want --from=build /out/<dir>/ <dir>/", in[1])
			continue
		}
		if dst == "/" || strings.HasPrefix(dst, "/bin") || strings.HasPrefix(dst, "/sbin") || strings.HasPrefix(dst, "/lib") {
			t.Errorf("COPY into %s: onto (or through) the base's /bin link, which BuildKit will not copy a directory onto", dst)
		}
		copies = append(copies, dst)
	}
	copied := func(p string) bool {
		return slices.ContainsFunc(copies, func(dst string) bool { return strings.HasPrefix(p, dst) })
	}
	if binary == "" || !copied(binary) {
		t.Errorf("the binary %q is not built into a directory the runtime stage copies (%v)", binary, copies)
	}
	if link == "" || !copied(link) {
		t.Errorf("the link %q is not made in a directory the runtime stage copies (%v)", link, copies)
	}
	if target != binary {
		t.Errorf("the link points to %s, the binary is %s", target, binary)
	}
	merged := strings.Replace(refCommand, "/bin/", "/usr/bin/", 1)
	if link != merged {
		t.Errorf("the link is %s; %s, the command Envoy Gateway starts, is %s in the image", link, refCommand, merged)
	}
	if ep := run.last("ENTRYPOINT"); ep != `["`+binary+`"]` {
		t.Errorf("ENTRYPOINT %s, want the binary %s", ep, binary)
	}
}

// refCommand is the command Envoy Gateway (internal/infrastructure/
// kubernetes/ratelimit) and the reference's manifests give the container.
const refCommand = "/bin/ratelimit"

// The Dockerfile's build is the binary it says: the same go build, and
// /bin/ratelimit, through the base's /bin link and the link the image adds,
// serves as limitd ratelimit while the binary stays limitd.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds limitd")
	}
	stages := readDockerfile(t)
	var build []string
	for _, in := range stages[0].instrs {
		if m := regexp.MustCompile(`^(CGO_ENABLED=0 go build .*) -o /out(/\S+) (\./cmd/limitd)$`).FindStringSubmatch(in[1]); in[0] == "RUN" && m != nil {
			build = m
		}
	}
	if build == nil {
		t.Fatalf("the Dockerfile no longer builds limitd into /out as this test expects")
	}
	out := t.TempDir()
	// The words of the RUN line as sh splits them (double quotes only),
	// but -trimpath and CGO_ENABLED=0: both make a build of their own,
	// every dependency compiled again (minutes on a cold cache), and change
	// nothing this test checks; the link flags are the line's.
	var args []string
	for _, m := range regexp.MustCompile(`"([^"]*)"|(\S+)`).FindAllStringSubmatch(strings.TrimPrefix(build[1], "CGO_ENABLED=0 go "), -1) {
		if w := m[1] + m[2]; w != "-trimpath" {
			args = append(args, strings.ReplaceAll(w, "${VERSION}", "image-test"))
		}
	}
	// The image's layout under out: the binary, the link, and the base's
	// /bin, a link to usr/bin.
	binary := filepath.Join(out, build[2])
	args = append(args, "-o", binary, build[3])
	cmd := exec.Command("go", args...)
	cmd.Dir = moduleRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, b)
	}
	if b, err := exec.Command(binary, "version").Output(); err != nil || !strings.Contains(string(b), "image-test") {
		t.Errorf("limitd version: %q, %v; want the build's version", b, err)
	}
	if err := os.MkdirAll(filepath.Join(out, "usr", "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(out, "usr", "bin", "ratelimit")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(out, "bin")); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(rules, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "web.yaml"), []byte(domainFile("web", "ip", 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rl := exec.CommandContext(ctx, filepath.Join(out, refCommand))
	rl.Env = []string{"RUNTIME_ROOT=" + filepath.Dir(rules), "HOST=127.0.0.1", "PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "USE_STATSD=true", "LIMITD_ADDR=0.0.0.0:8080", // the image's LIMITD_ADDR
		"REDIS_URL=" + miniredis.RunT(t).Addr()} // without it, limitd ratelimit stops as the reference does
	stderr, err := rl.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rl.Start(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "limitd serving") {
			break
		}
	}
	_ = rl.Process.Signal(syscall.SIGTERM)
	for sc.Scan() {
		seen = append(seen, sc.Text())
	}
	werr := rl.Wait()
	log := strings.Join(seen, "\n")
	if !strings.Contains(log, "mode=ratelimit") || !strings.Contains(log, "ignored: USE_STATSD") || !strings.Contains(log, `addr="" grpc_addr=127.0.0.1:`) {
		t.Errorf("/bin/ratelimit did not serve as limitd ratelimit, its API off:\n%s", log)
	}
	if werr != nil {
		t.Errorf("stop on SIGTERM: %v\n%s", werr, log)
	}
}
