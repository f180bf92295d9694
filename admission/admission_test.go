package admission

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/config"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	if err := Check(config.Admission{}, dir); err != nil {
		t.Errorf("no thresholds: %v", err)
	}
	if err := Check(config.Admission{MemoryPercent: 100, DiskPercent: 100}, dir); err != nil {
		t.Errorf("100%% thresholds: %v", err)
	}
	used, err := memoryUsed()
	if err != nil || used <= 0 || used >= 100 {
		t.Fatalf("memory used %v%%, %v", used, err)
	}
	err = Check(config.Admission{MemoryPercent: used / 2}, dir)
	if err == nil || !strings.Contains(err.Error(), "admission.memory_percent") {
		t.Errorf("memory above the threshold: %v", err)
	}
	disk, err := diskUsed(dir)
	if err != nil || disk <= 0 {
		t.Fatalf("disk used %v%%, %v", disk, err)
	}
	err = Check(config.Admission{DiskPercent: disk / 2, DiskPaths: []string{dir}}, "/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "admission.disk_percent") || !strings.Contains(err.Error(), dir) {
		t.Errorf("disk above the threshold: %v", err)
	}
	if err := Check(config.Admission{DiskPercent: 50}, "/nonexistent/gvx"); err == nil || !strings.Contains(err.Error(), "admission.disk_paths") {
		t.Errorf("missing path: %v", err)
	}
}
