package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
)

// TestCRINAT: a pod whose annotations ask for gvx's NAT
// (dev.gvx.network=nat, passed by containerd's pod_annotations) runs as a
// NAT sandbox: its containers share eth0 10.0.2.15, reach a host server
// on 127.0.0.1 through 10.0.2.2 where the pod's policy allows it, and are
// refused (at once) where it does not.
func TestCRINAT(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	allowed := startNATHTTP(t, "hello-cri-nat")
	other := startNATHTTP(t, "must-not-be-reached")
	enc, err := api.EncodeNAT(api.NAT{Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", allowed.port)}}})
	if err != nil {
		t.Fatal(err)
	}
	pod, podCfg := x.runPodWith(t, "pnat", "gvxanno", map[string]string{api.AnnotationNetwork: api.NetworkNAT, api.AnnotationNAT: enc})
	a := x.createContainer(t, pod, podCfg, "a", []string{"sleep", "600"}, nil)
	x.must(t, "start", a)
	b := x.createContainer(t, pod, podCfg, "b", []string{"sleep", "600"}, nil)
	x.must(t, "start", b)
	for _, id := range []string{a, b} {
		r := x.run(t, "exec", id, "sh", "-c", "ip -4 addr show eth0; ip route")
		if !strings.Contains(r.stdout, "10.0.2.15/24") || !strings.Contains(r.stdout, "default via 10.0.2.2") {
			t.Errorf("container %s's network: %q %q, want eth0 10.0.2.15/24 via 10.0.2.2", id, r.stdout, r.stderr)
		}
		r = x.run(t, "exec", id, "wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", allowed.port))
		if r.code != 0 || r.stdout != "hello-cri-nat" {
			t.Errorf("container %s through the NAT: exit %d %q %q", id, r.code, r.stdout, r.stderr)
		}
	}
	r := x.run(t, "exec", a, "wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", other.port))
	if r.code == 0 || !strings.Contains(r.stderr, "refused") {
		t.Errorf("a port the pod's policy does not allow: exit %d %q %q, want connection refused", r.code, r.stdout, r.stderr)
	}
	if n := allowed.conns.Load(); n != 2 {
		t.Errorf("the allowed server saw %d connections, want 2", n)
	}
	if n := other.conns.Load(); n != 0 {
		t.Errorf("the refused server saw %d connections", n)
	}
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
}

// TestCRINATPortForward: crictl port-forward (kubectl port-forward's CRI
// call) reaches a server in a NAT pod: the shim's steering sends
// containerd's dial through the NAT's control socket to the guest's port
// (the pod's CNI address is not the guest's). A file of 4 MiB arrives
// intact.
func TestCRINATPortForward(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	enc, err := api.EncodeNAT(api.NAT{DNS: []string{"127.0.0.1:9"}})
	if err != nil {
		t.Fatal(err)
	}
	pod, podCfg := x.runPodWith(t, "pfnat", "gvxanno", map[string]string{api.AnnotationNetwork: api.NetworkNAT, api.AnnotationNAT: enc})
	web := x.createContainer(t, pod, podCfg, "web", []string{"sh", "-c",
		"mkdir /www && echo forwarded-through-the-nat > /www/index.html && head -c 4194304 /dev/urandom > /www/big && sha256sum /www/big > /sum-big && exec httpd -f -p 80 -h /www"}, nil)
	x.must(t, "start", web)
	x.waitListening(t, web, 80)
	x.getForwarded(t, pod, web, "forwarded-through-the-nat", 4<<20)
	x.must(t, "stop", "--timeout", "1", web)
	x.must(t, "rm", web)
	x.must(t, "stopp", pod)
	x.must(t, "rmp", pod)
}
