package oci

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// TestOwnAnnotationsRefused: a spec that arrives with an annotation only
// gvx sets (the pool sandbox a task's process starts in, or the one a
// container's delete destroys) is refused naming it.
func TestOwnAnnotationsRefused(t *testing.T) {
	for _, a := range []string{api.AnnotationPoolExec, api.AnnotationPoolSandbox} {
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
