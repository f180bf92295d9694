package launcher

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gvxrun/gvx/api"
)

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		in, want  []string
		wantErr   bool
	}{
		{name: "empty env", env: " ", in: []string{"gvx-sentry", "state", "x"}, want: []string{"gvx-sentry", "state", "x"}},
		{name: "flags first", env: "--platform=systrap --network=none", in: []string{"gvx-sentry", "--root", "/r", "create", "x"},
			want: []string{"gvx-sentry", "--platform=systrap", "--network=none", "--root", "/r", "create", "x"}},
		{name: "not a flag", env: "--platform=systrap boot", in: []string{"gvx-sentry"}, wantErr: true},
		{name: "bare dashes", env: "--", in: []string{"gvx-sentry"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Args(tc.in, tc.env)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	t.Setenv(api.FlagsEnv, "")
	dir := t.TempDir()
	link := filepath.Join(dir, "gvx-sentry")
	if got, err := Flags(link); err != nil || got != "" {
		t.Errorf("no file: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, api.FlagsFile), []byte("--network=none"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Flags(link); err != nil || got != "--network=none" {
		t.Errorf("file: %q %v", got, err)
	}
	if got, _ := Flags("runsc-gofer"); got != "" {
		t.Errorf("relative argv0 (gVisor's re-executions): %q", got)
	}
	t.Setenv(api.FlagsEnv, "--debug")
	if got, _ := Flags(link); got != "--debug" {
		t.Errorf("env first: %q", got)
	}
	if got, _ := Flags("runsc-gofer"); got != "--debug" {
		t.Errorf("env with a relative argv0: %q", got)
	}
}
