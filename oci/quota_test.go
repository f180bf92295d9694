package oci

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "512K": 512 << 10, "64Mi": 64 << 20, "2G": 2 << 30, "1Ti": 1 << 40, " 3m ": 3 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "i", "Mi", "-1", "1.5G", "10X", "99999999999T"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) took it", in)
		}
	}
}

func quotaSpec(limit int64, ann map[string]string) *specs.Spec {
	s := &specs.Spec{Linux: &specs.Linux{}, Annotations: ann}
	if limit > 0 {
		s.Linux.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}
	}
	return s
}

func TestApplyQuotasMemory(t *testing.T) {
	defer func(f func() bool) { cgroupV2 = f }(cgroupV2)
	def := config.Default().Resources
	for _, v2 := range []bool{false, true} {
		cgroupV2 = func() bool { return v2 }
		for _, tc := range []struct {
			ann  string
			want int64
		}{{"", 0}, {"50%", 500 << 20}, {"768Mi", 768 << 20}, {"0", 0}, {"2G", 0}} {
			ann := map[string]string{}
			if tc.ann != "" {
				ann[api.AnnotationMemoryHigh] = tc.ann
			}
			s := quotaSpec(1000<<20, ann)
			if err := applyQuotas(s, def); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if tc.ann == "" {
				want = (1000 << 20) / 100 * 90
			}
			var got int64
			if v2 {
				if v, ok := s.Linux.Resources.Unified["memory.high"]; ok {
					got, _ = ParseSize(v)
				}
			} else if r := s.Linux.Resources.Memory.Reservation; r != nil {
				got = *r
			}
			if got != want {
				t.Errorf("v2=%v %s=%q: reclaim threshold %d, want %d", v2, api.AnnotationMemoryHigh, tc.ann, got, want)
			}
		}
	}
	if err := applyQuotas(quotaSpec(1<<30, map[string]string{api.AnnotationMemoryHigh: "lots"}), def); err == nil || !strings.Contains(err.Error(), api.AnnotationMemoryHigh) {
		t.Errorf("bad annotation: %v", err)
	}
	// No memory limit: no threshold, no resources added.
	s := quotaSpec(0, nil)
	if err := applyQuotas(s, def); err != nil || s.Linux.Resources != nil {
		t.Errorf("no limit: %+v, %v", s.Linux.Resources, err)
	}
}

func TestApplyQuotasPids(t *testing.T) {
	s := quotaSpec(0, nil)
	if err := applyQuotas(s, config.Resources{Pids: 100}); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[api.AnnotationPidsLimit] != "100" || *s.Linux.Resources.Pids.Limit != api.HostPidsLimit(100) {
		t.Errorf("config default: %v, %+v", s.Annotations, s.Linux.Resources.Pids)
	}
	// The spec's limit wins over the config's and is the guest's.
	lim := int64(30)
	s = quotaSpec(0, nil)
	s.Linux.Resources = &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &lim}}
	if err := applyQuotas(s, config.Resources{Pids: 100}); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[api.AnnotationPidsLimit] != "30" || *s.Linux.Resources.Pids.Limit != api.HostPidsLimit(30) {
		t.Errorf("spec limit: %v, %+v", s.Annotations, s.Linux.Resources.Pids)
	}
	if err := applyQuotas(quotaSpec(0, map[string]string{api.AnnotationPidsLimit: "many"}), config.Resources{}); err == nil {
		t.Error("bad pids annotation taken")
	}
}

func TestRootfsSize(t *testing.T) {
	if n, err := RootfsSize(quotaSpec(0, nil), 7); err != nil || n != 7 {
		t.Errorf("default: %d, %v", n, err)
	}
	if n, err := RootfsSize(quotaSpec(0, map[string]string{api.AnnotationRootfsSize: "1Gi"}), 7); err != nil || n != 1<<30 {
		t.Errorf("annotation: %d, %v", n, err)
	}
	if _, err := RootfsSize(quotaSpec(0, map[string]string{api.AnnotationRootfsSize: "big"}), 0); err == nil {
		t.Error("bad size taken")
	}
}
