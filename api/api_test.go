package api_test

import (
	"reflect"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/contracttest"
)

func contract(t *testing.T) *contracttest.Contract {
	t.Helper()
	c, err := contracttest.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNames: every name of the contract is the one testdata/contract.json
// spells, and no name there is left unchecked.
func TestNames(t *testing.T) {
	c := contract(t)
	got := map[string]string{
		"runtime_type":               api.RuntimeType,
		"group_label":                api.GroupLabel,
		"shim_binary":                api.ShimBinary,
		"shim_server_binary":         api.ShimServerBinary,
		"cli_binary":                 api.CLIBinary,
		"sentry_binary":              api.SentryBinary,
		"runtime_binary":             api.RuntimeBinary,
		"runtime_wait_command":       api.RuntimeWaitCommand,
		"hook_binary":                api.HookBinary,
		"pause_binary":               api.PauseBinary,
		"nat_binary":                 api.NATBinary,
		"flags_env":                  api.FlagsEnv,
		"flags_file":                 api.FlagsFile,
		"exec_guest_pid_suffix":      api.ExecGuestPidSuffix,
		"hook_loopback":              api.HookLoopback,
		"annotation_volumes":         api.AnnotationVolumes,
		"annotation_pool_exec":       api.AnnotationPoolExec,
		"annotation_pool_sandbox":    api.AnnotationPoolSandbox,
		"annotation_pod_netns":       api.AnnotationPodNetns,
		"annotation_pod_cgroup":      api.AnnotationPodCgroup,
		"annotation_docker":          api.AnnotationDocker,
		"annotation_restore_from":    api.AnnotationRestoreFrom,
		"annotation_restore_target":  api.AnnotationRestoreTarget,
		"annotation_restore_image":   api.AnnotationRestoreImage,
		"annotation_network":         api.AnnotationNetwork,
		"annotation_nat":             api.AnnotationNAT,
		"nat_command":                api.NATCommand,
		"annotation_max_lifetime":    api.AnnotationMaxLifetime,
		"annotation_memory_high":     api.AnnotationMemoryHigh,
		"annotation_rootfs_size":     api.AnnotationRootfsSize,
		"annotation_pids_limit":      api.AnnotationPidsLimit,
		"lease_label":                api.LeaseLabel,
		"cri_container_type":         api.CRIContainerType,
		"cri_sandbox_id":             api.CRISandboxID,
		"cri_container_name":         api.CRIContainerName,
		"cri_role_sandbox":           api.CRIRoleSandbox,
		"cri_role_container":         api.CRIRoleContainer,
		"not_running":                api.NotRunning,
		"checkpoint_state_file":      api.CheckpointStateFile,
		"checkpoint_pages_meta_file": api.CheckpointPagesMetaFile,
		"checkpoint_pages_file":      api.CheckpointPagesFile,
	}
	if !reflect.DeepEqual(got, c.Names) {
		for k, v := range c.Names {
			if got[k] != v {
				t.Errorf("name %s: contract.json says %q, the package %q", k, v, got[k])
			}
		}
		for k := range got {
			if _, ok := c.Names[k]; !ok {
				t.Errorf("name %s is not in contract.json", k)
			}
		}
	}
	if api.ExitKilled != c.ExitKilled {
		t.Errorf("ExitKilled = %d, contract.json says %d", api.ExitKilled, c.ExitKilled)
	}
}

func TestVolumes(t *testing.T) {
	c := contract(t)
	enc, err := api.EncodeVolumes(c.Volumes.Decoded)
	if err != nil || enc != c.Volumes.Annotation {
		t.Errorf("EncodeVolumes = %s, %v; contract.json says %s", enc, err, c.Volumes.Annotation)
	}
	dec, err := api.DecodeVolumes(c.Volumes.Annotation)
	if err != nil || !reflect.DeepEqual(dec, c.Volumes.Decoded) {
		t.Errorf("DecodeVolumes = %+v, %v; want %+v", dec, err, c.Volumes.Decoded)
	}
	for _, bad := range []string{"{", `[{"image":"rel.ext4","staging":"/s"}]`, `[{"image":"/a.ext4","staging":"s"}]`} {
		if _, err := api.DecodeVolumes(bad); err == nil {
			t.Errorf("DecodeVolumes(%s) accepted", bad)
		}
	}
	if v, err := api.DecodeVolumes(""); v != nil || err != nil {
		t.Errorf("DecodeVolumes(\"\") = %v, %v", v, err)
	}
}

func TestLayout(t *testing.T) {
	c := contract(t)
	l := api.Layout{Dir: c.Layout["state_dir"]}
	root := api.SentryRoot(l.SentryRoot("t1") + "/default")
	got := map[string]string{
		"state_dir":      l.Dir,
		"sentry_root":    l.SentryRoot("t1"),
		"task_dir":       l.TaskDir("default", "t1"),
		"rootfs":         l.Rootfs("default", "t1"),
		"volumes":        l.Volumes("default", "t1"),
		"docker_socket":  l.DockerSocket("default", "t1"),
		"pool_socket":    l.DefaultPoolSocket(),
		"pool":           string(l.Pool(l.DefaultPoolSocket())),
		"monitor_socket": root.MonitorSocket("t1"),
		"task_record":    root.TaskRecord("t1"),
		"oom_marker":     root.OOMMarker("t1"),
		"sandbox_state":  root.SandboxState("sb"),
		"null_netns":     root.NullNetNS(),
		"nat_stats":      root.NATStats("t1"),
		"nat_log":        root.NATLog("t1"),
		"restore_target": root.RestoreTarget("t1"),
	}
	if !reflect.DeepEqual(got, c.Layout) {
		t.Errorf("layout:\n got %v\nwant %v", got, c.Layout)
	}
}
