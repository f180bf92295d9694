package oci

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// TestOwnAnnotationsRefused: a spec that arrives with an annotation only
// gvx sets (the pool sandbox a task's process starts in, the one a
// container's delete destroys, the network namespace an adopted pod
// sandbox gets the interfaces of) is refused naming it.
func TestOwnAnnotationsRefused(t *testing.T) {
	for _, a := range []string{api.AnnotationPoolExec, api.AnnotationPoolSandbox, api.AnnotationPodNetns} {
		s := baseSpec()
		s.Annotations = map[string]string{a: "victim"}
		_, err := Prepare(s, config.Default())
		if err == nil || !strings.Contains(err.Error(), a+`="victim"`) || !strings.Contains(err.Error(), "set by gvx itself") {
			t.Errorf("%s: %v", a, err)
		}
	}
	s := baseSpec()
	s.Annotations = map[string]string{api.AnnotationDocker: "true"}
	if _, err := Prepare(s, config.Default()); err != nil {
		t.Errorf("a user annotation: %v", err)
	}
}

// TestRestoreFrom: a task names its checkpoint directory; a pod's
// container (CRI's annotations on its spec) may not.
func TestRestoreTarget(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want bool
		err  string // "" for none
	}{
		{nil, false, ""},
		{map[string]string{api.AnnotationRestoreTarget: "true"}, true, ""},
		{map[string]string{api.AnnotationRestoreTarget: "false"}, false, ""},
		{map[string]string{api.AnnotationRestoreTarget: "yes"}, false, "want true or false"},
		{map[string]string{api.AnnotationRestoreTarget: "true", api.CRIContainerType: "sandbox", api.CRISandboxID: "p1"}, false, "pod_annotations"},
		{map[string]string{api.AnnotationRestoreTarget: "true", api.AnnotationRestoreFrom: "/ck"}, false, api.AnnotationRestoreFrom},
	} {
		got, err := RestoreTarget(&specs.Spec{Annotations: tc.ann})
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, %v; want %v and an error saying %q", tc.ann, got, err, tc.want, tc.err)
		}
	}
}

func TestRestoreFrom(t *testing.T) {
	plain := &specs.Spec{Annotations: map[string]string{api.AnnotationRestoreFrom: "/var/lib/gvx/ck/1"}}
	if dir, err := RestoreFrom(plain); err != nil || dir != "/var/lib/gvx/ck/1" {
		t.Errorf("plain task: %q, %v", dir, err)
	}
	if dir, err := RestoreFrom(&specs.Spec{}); err != nil || dir != "" {
		t.Errorf("no annotation: %q, %v", dir, err)
	}
	for _, role := range []string{"sandbox", "container"} {
		pod := &specs.Spec{Annotations: map[string]string{api.AnnotationRestoreFrom: "/etc", api.CRIContainerType: role, api.CRISandboxID: "p1"}}
		_, err := RestoreFrom(pod)
		if err == nil || !strings.Contains(err.Error(), "pod_annotations") || !strings.Contains(err.Error(), api.AnnotationRestoreFrom) {
			t.Errorf("pod %s: %v, want a refusal naming the annotation and pod_annotations", role, err)
		}
	}
}
