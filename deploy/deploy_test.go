package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// object is a manifest as Kubernetes reads it (YAML to JSON), with the
// fields the tests look at.
type object struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	raw        map[string]any
	file       string
}

func (o object) name() string { s, _ := o.Metadata["name"].(string); return s }

// get walks maps by key and lists by index ("0").
func get(v any, keys ...string) any {
	for _, k := range keys {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func str(v any, keys ...string) string { s, _ := get(v, keys...).(string); return s }

// objects parses every YAML document of every manifest file.
func objects(t *testing.T) []object {
	t.Helper()
	var out []object
	err := fs.WalkDir(Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := Files.ReadFile(p)
		if err != nil {
			return err
		}
		for i, doc := range bytes.Split(data, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				t.Errorf("%s document %d: %v", p, i, err)
				continue
			}
			if err := yaml.Unmarshal(doc, &o.raw); err != nil {
				t.Errorf("%s document %d: %v", p, i, err)
			}
			o.file = p
			if o.APIVersion == "" || o.Kind == "" {
				t.Errorf("%s document %d: no apiVersion or kind", p, i)
			}
			if o.name() == "" && o.Kind != "Kustomization" {
				t.Errorf("%s: %s without metadata.name", p, o.Kind)
			}
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func find(t *testing.T, objs []object, kind, file string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && (file == "" || o.file == file) {
			return o
		}
	}
	t.Fatalf("no %s in %s", kind, file)
	return object{}
}

// scriptDefaults reads install.sh's VAR=${VAR:-default} lines.
func scriptDefaults(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("installer/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	re := regexp.MustCompile(`(?m)^([A-Z_]+)=\$\{([A-Z_]+):-(.*)\}$`)
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		if m[1] == m[2] {
			out[m[1]] = strings.Trim(m[3], "'")
		}
	}
	if len(out) < 10 {
		t.Fatalf("install.sh: found only %v", out)
	}
	return out
}

// TestKustomizations: every resource, generator file and patch target a
// kustomization names exists.
func TestKustomizations(t *testing.T) {
	objs := objects(t)
	n := 0
	for _, k := range objs {
		if k.Kind != "Kustomization" {
			continue
		}
		n++
		dir := path.Dir(k.file)
		resources, _ := get(k.raw, "resources").([]any)
		if len(resources) == 0 {
			t.Errorf("%s: no resources", k.file)
		}
		for _, r := range resources {
			p := path.Join(dir, r.(string))
			if st, err := fs.Stat(Files, p); err != nil {
				t.Errorf("%s: resource %s: %v", k.file, r, err)
			} else if st.IsDir() {
				if _, err := fs.Stat(Files, path.Join(p, "kustomization.yaml")); err != nil {
					t.Errorf("%s: resource %s is a directory without kustomization.yaml", k.file, r)
				}
			}
		}
		gens, _ := get(k.raw, "configMapGenerator").([]any)
		for _, g := range gens {
			files, _ := get(g, "files").([]any)
			for _, f := range files {
				if _, err := fs.Stat(Files, path.Join(dir, f.(string))); err != nil {
					t.Errorf("%s: configMapGenerator file %s: %v", k.file, f, err)
				}
			}
		}
	}
	if n != 4 {
		t.Errorf("%d kustomizations, want 4 (deploy/, base, overlays/uninstall, examples/agent-sandbox)", n)
	}
}

// TestRuntimeClass: the handler is the installer's, the overhead parses,
// and gvx pods go only to nodes the installer runs on.
func TestRuntimeClass(t *testing.T) {
	objs := objects(t)
	rc := find(t, objs, "RuntimeClass", RuntimeClassFile)
	if rc.APIVersion != "node.k8s.io/v1" || rc.name() != "gvx" {
		t.Errorf("RuntimeClass %s %s", rc.APIVersion, rc.name())
	}
	if h := str(rc.raw, "handler"); h != scriptDefaults(t)["GVX_HANDLER"] {
		t.Errorf("handler %q, want the installer's GVX_HANDLER %q", h, scriptDefaults(t)["GVX_HANDLER"])
	}
	mem, err := RuntimeClassOverhead()
	if err != nil || mem < 16<<20 || mem > 1<<30 {
		t.Errorf("overhead %d %v: want a measured figure in MiB", mem, err)
	}
	ds := find(t, objs, "DaemonSet", "base/daemonset.yaml")
	want := get(ds.raw, "spec", "template", "spec", "nodeSelector")
	got := get(rc.raw, "scheduling", "nodeSelector")
	if want == nil || yamlString(t, got) != yamlString(t, want) {
		t.Errorf("RuntimeClass scheduling.nodeSelector %v, DaemonSet nodeSelector %v: want the same", got, want)
	}
}

func yamlString(t *testing.T, v any) string {
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestDaemonSet: the installer runs privileged in the node's pid
// namespace, with the script's own defaults, and every path the script
// writes is on a hostPath mount at HOST_ROOT + the node's path.
func TestDaemonSet(t *testing.T) {
	objs := objects(t)
	ds := find(t, objs, "DaemonSet", "base/daemonset.yaml")
	spec := get(ds.raw, "spec", "template", "spec")
	if get(spec, "hostPID") != true {
		t.Error("hostPID: want true (nsenter -t 1, and the running-shim check)")
	}
	if get(ds.raw, "spec", "selector", "matchLabels") == nil ||
		yamlString(t, get(ds.raw, "spec", "selector", "matchLabels")) != yamlString(t, get(ds.raw, "spec", "template", "metadata", "labels")) {
		t.Error("selector does not match the template's labels")
	}
	defaults := scriptDefaults(t)
	hostPaths := map[string]string{}
	volumes, _ := get(spec, "volumes").([]any)
	configMap := ""
	for _, v := range volumes {
		if p := str(v, "hostPath", "path"); p != "" {
			hostPaths[str(v, "name")] = p
		}
		if c := str(v, "configMap", "name"); c != "" {
			configMap = str(v, "name")
			if c != "gvx-config" {
				t.Errorf("configMap volume %s, want gvx-config (base's configMapGenerator)", c)
			}
		}
	}
	containers := map[string]any{}
	for _, list := range []string{"initContainers", "containers"} {
		cs, _ := get(spec, list).([]any)
		for _, c := range cs {
			containers[list+"/"+str(c, "name")] = c
		}
	}
	install, wait := containers["initContainers/install"], containers["containers/gvx-node"]
	if install == nil || wait == nil {
		t.Fatalf("containers %v: want initContainers/install and containers/gvx-node", containers)
	}
	if cmd := yamlString(t, get(install, "command")); cmd != yamlString(t, []string{"/gvx/install.sh", "install"}) {
		t.Errorf("install command %s", cmd)
	}
	if cmd := yamlString(t, get(wait, "command")); cmd != yamlString(t, []string{"/gvx/install.sh", "wait"}) {
		t.Errorf("main command %s", cmd)
	}
	for name, c := range containers {
		if get(c, "securityContext", "privileged") != true {
			t.Errorf("%s: not privileged", name)
		}
		env := map[string]string{}
		list, _ := get(c, "env").([]any)
		for _, e := range list {
			env[str(e, "name")] = str(e, "value")
		}
		hostRoot := env["HOST_ROOT"]
		if hostRoot != "/host" {
			t.Errorf("%s: HOST_ROOT %q", name, hostRoot)
		}
		for k, v := range env {
			if d, ok := defaults[k]; !ok {
				t.Errorf("%s: env %s is not one of install.sh's settings", name, k)
			} else if k != "HOST_ROOT" && k != "GVX_CONFIG_SRC" && v != d {
				t.Errorf("%s: env %s=%q differs from install.sh's default %q (keep them one)", name, k, v, d)
			}
		}
		mounts := map[string]string{} // mountPath -> volume
		ml, _ := get(c, "volumeMounts").([]any)
		for _, m := range ml {
			mounts[str(m, "mountPath")] = str(m, "name")
		}
		// Each node path the script writes: on a hostPath volume whose
		// mount is HOST_ROOT + its host path.
		for _, k := range []string{"GVX_BIN_DIR", "CONTAINERD_CONFIG", "CONTAINERD_DROPIN", "GVX_CONFIG", "GVX_INSTALLER_STATE", "GVX_POOL_UNIT"} {
			p := defaults[k]
			if v, ok := env[k]; ok {
				p = v
			}
			covered := false
			for mp, vol := range mounts {
				hp, ok := hostPaths[vol]
				if ok && mp == hostRoot+hp && strings.HasPrefix(p, hp+"/") {
					covered = true
				}
			}
			if !covered {
				t.Errorf("%s: %s=%s is on no hostPath mount at %s%s (mounts %v, volumes %v)", name, k, p, hostRoot, p, mounts, hostPaths)
			}
		}
		src := env["GVX_CONFIG_SRC"]
		if mounts[path.Dir(src)] != configMap || path.Base(src) != "config.toml" {
			t.Errorf("%s: GVX_CONFIG_SRC %s is not config.toml of the gvx-config mount (%v)", name, src, mounts)
		}
	}
}

// TestUninstallOverlay: the overlay turns the init container into an
// uninstall and drops the RuntimeClass.
func TestUninstallOverlay(t *testing.T) {
	k := find(t, objects(t), "Kustomization", "overlays/uninstall/kustomization.yaml")
	patches, _ := get(k.raw, "patches").([]any)
	var sawDS, sawRC bool
	for _, p := range patches {
		body := str(p, "patch")
		switch str(p, "target", "kind") {
		case "DaemonSet":
			sawDS = strings.Contains(body, "/spec/template/spec/initContainers/0/command") && strings.Contains(body, `"uninstall"`)
		case "RuntimeClass":
			sawRC = strings.Contains(body, "$patch: delete")
		}
	}
	if !sawDS || !sawRC {
		t.Errorf("uninstall overlay: DaemonSet patch %v, RuntimeClass delete %v", sawDS, sawRC)
	}
	ds := find(t, objects(t), "DaemonSet", "base/daemonset.yaml")
	if str(ds.raw, "spec", "template", "spec", "initContainers", "0", "name") != "install" {
		t.Error("the overlay patches initContainers/0: it must be the install container")
	}
}

// TestAgentSandboxExample: the template's pods run on gvx with docker
// mode (an annotation the installer's fragment passes to gvx) and
// /var/lib/docker on an ext4lite volume; pool and claim name the template.
func TestAgentSandboxExample(t *testing.T) {
	objs := objects(t)
	const dir = "examples/agent-sandbox/"
	tmpl := find(t, objs, "SandboxTemplate", dir+"sandboxtemplate.yaml")
	for _, o := range objs {
		if strings.HasPrefix(o.file, dir) && o.Kind != "Kustomization" && o.Kind != "Namespace" &&
			o.APIVersion != "extensions.agents.x-k8s.io/v1alpha1" {
			t.Errorf("%s: %s %s, want extensions.agents.x-k8s.io/v1alpha1", o.file, o.Kind, o.APIVersion)
		}
	}
	pod := get(tmpl.raw, "spec", "podTemplate")
	if str(pod, "spec", "runtimeClassName") != "gvx" {
		t.Errorf("runtimeClassName %q", str(pod, "spec", "runtimeClassName"))
	}
	if str(pod, "metadata", "annotations", api.AnnotationDocker) != "true" {
		t.Errorf("pod annotations %v: want %s=true", get(pod, "metadata", "annotations"), api.AnnotationDocker)
	}
	if !strings.Contains(scriptDefaults(t)["GVX_POD_ANNOTATIONS"], `"`+api.AnnotationDocker+`"`) {
		t.Errorf("install.sh's GVX_POD_ANNOTATIONS do not pass %s", api.AnnotationDocker)
	}
	vols := map[string]any{}
	vl, _ := get(pod, "spec", "volumes").([]any)
	for _, v := range vl {
		vols[str(v, "name")] = v
	}
	found := false
	cs, _ := get(pod, "spec", "containers").([]any)
	for _, c := range cs {
		ml, _ := get(c, "volumeMounts").([]any)
		for _, m := range ml {
			if str(m, "mountPath") == "/var/lib/docker" {
				v := vols[str(m, "name")]
				found = str(v, "hostPath", "type") == "File" && strings.HasSuffix(str(v, "hostPath", "path"), ".ext4")
			}
		}
	}
	if !found {
		t.Error("/var/lib/docker: want a hostPath of type File naming an ext4 image (an ext4lite volume)")
	}
	for _, kind := range []string{"SandboxWarmPool", "SandboxClaim"} {
		o := find(t, objs, kind, "")
		if str(o.raw, "spec", "sandboxTemplateRef", "name") != tmpl.name() {
			t.Errorf("%s sandboxTemplateRef %v, want %s", kind, get(o.raw, "spec", "sandboxTemplateRef"), tmpl.name())
		}
	}
}

// TestNodeConfig: the gvx config the ConfigMap gives every node is one
// gvx accepts (unknown keys are errors at each pod's create).
func TestNodeConfig(t *testing.T) {
	data, err := Files.ReadFile("base/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(data); err != nil {
		t.Errorf("base/config.toml: %v", err)
	}
}

// built runs kubectl's kustomize (offline) on dir and parses its output.
func built(t *testing.T, kubectl, dir string) []object {
	t.Helper()
	out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	var objs []object
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("kustomize output of %s: %v", dir, err)
		}
		if err := yaml.Unmarshal(doc, &o.raw); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestKustomizeBuild: the base, the uninstall overlay and the example
// build with kustomize (kubectl's, when installed): the ConfigMap's
// generated name reaches the DaemonSet, the RuntimeClass stays
// cluster-scoped, the overlay uninstalls and drops the RuntimeClass.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed (its kustomize builds the manifests)")
	}
	kinds := func(objs []object) map[string]object {
		m := map[string]object{}
		for _, o := range objs {
			m[o.Kind] = o
		}
		return m
	}
	base := kinds(built(t, kubectl, "."))
	for _, k := range []string{"Namespace", "ConfigMap", "DaemonSet", "RuntimeClass"} {
		if _, ok := base[k]; !ok {
			t.Errorf("deploy/ builds no %s", k)
		}
	}
	if ns := base["RuntimeClass"].Metadata["namespace"]; ns != nil {
		t.Errorf("RuntimeClass got namespace %v", ns)
	}
	cm := base["ConfigMap"].name()
	vols, _ := get(base["DaemonSet"].raw, "spec", "template", "spec", "volumes").([]any)
	linked := false
	for _, v := range vols {
		linked = linked || str(v, "configMap", "name") == cm
	}
	if !strings.HasPrefix(cm, "gvx-config-") || !linked {
		t.Errorf("ConfigMap %s not the DaemonSet's volume (%v)", cm, vols)
	}
	un := kinds(built(t, kubectl, "overlays/uninstall"))
	if _, ok := un["RuntimeClass"]; ok {
		t.Error("overlays/uninstall still has the RuntimeClass")
	}
	if cmd := get(un["DaemonSet"].raw, "spec", "template", "spec", "initContainers", "0", "command"); yamlString(t, cmd) != yamlString(t, []string{"/gvx/install.sh", "uninstall"}) {
		t.Errorf("overlays/uninstall init command %v", cmd)
	}
	ex := kinds(built(t, kubectl, "examples/agent-sandbox"))
	for _, k := range []string{"SandboxTemplate", "SandboxWarmPool", "SandboxClaim"} {
		if ex[k].Metadata["namespace"] != "gvx-agents" {
			t.Errorf("example %s: namespace %v", k, ex[k].Metadata["namespace"])
		}
	}
}
