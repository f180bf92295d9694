package launcher

import (
	"reflect"
	"testing"
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
