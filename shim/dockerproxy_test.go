package shim

import (
	"strings"
	"testing"

	"github.com/gvxrun/gvx/internal/dockerapi"
)

// bridgeSpecs gives each of dockerd's bridges as its device and the
// gateway with the subnet's length, and refuses what could not be a
// device or an address (dockerd's answer is the guest's word).
func TestBridgeSpecs(t *testing.T) {
	got, err := bridgeSpecs([]dockerapi.Bridge{
		{Device: "docker0", Gateway: "172.17.0.1", Subnet: "172.17.0.0/16"},
		{Device: "br-0123456789ab", Gateway: "fd00:1::1", Subnet: "fd00:1::/64"},
	})
	if err != nil || len(got) != 2 || got[0].device+"="+got[0].addr.String() != "docker0=172.17.0.1/16" ||
		got[1].device+"="+got[1].addr.String() != "br-0123456789ab=fd00:1::1/64" {
		t.Fatalf("bridgeSpecs: %+v, %v", got, err)
	}
	script := bridgeScript(got[:1])
	for _, want := range []string{"ip link add docker0 type bridge", "ip addr add 172.17.0.1/16 dev docker0", "ip link set docker0 up", "ip route replace 172.17.0.0/16 dev docker0"} {
		if !strings.Contains(script, want) {
			t.Errorf("the fallback script lacks %q:\n%s", want, script)
		}
	}
	for _, bad := range []dockerapi.Bridge{
		{Device: "docker0; reboot", Gateway: "172.17.0.1", Subnet: "172.17.0.0/16"},
		{Device: "docker0", Gateway: "172.17.0.1 dev lo", Subnet: "172.17.0.0/16"},
		{Device: "docker0", Gateway: "172.17.0.1", Subnet: "172.17.0.0"},
	} {
		if _, err := bridgeSpecs([]dockerapi.Bridge{bad}); err == nil {
			t.Errorf("bridgeSpecs(%+v): no error", bad)
		}
	}
}
