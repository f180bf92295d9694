package harness

import (
	"os/exec"
	"slices"
	"strings"
)

// cniTables are the iptables tables CNI plugins add chains to: nat
// (bridge's masquerade, portmap) and filter (firewall, portmap).
var cniTables = []string{"nat", "filter"}

// CNIChains lists the CNI plugins' iptables chains ("table/chain"): what a
// bridge network leaves on the host until its chains are removed (their
// rules go with each container, the chains themselves stay). nil if
// iptables cannot be read.
func CNIChains() []string {
	chains := []string{} // none is not nil

	for _, table := range cniTables {
		out, err := exec.Command("iptables", "-w", "-t", table, "-S").Output()
		if err != nil {
			return nil
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "-N" && strings.HasPrefix(f[1], "CNI-") {
				chains = append(chains, table+"/"+f[1])
			}
		}
	}
	slices.Sort(chains)
	return chains
}

// RemoveCNIChains removes the CNI chains not in before (a CNIChains
// list; nil: nothing is removed), and the rules of other chains that jump
// to them.
func RemoveCNIChains(before []string) {
	if before == nil {
		return
	}
	for _, table := range cniTables {
		var added []string
		for _, c := range CNIChains() {
			if t, chain, _ := strings.Cut(c, "/"); t == table && !slices.Contains(before, c) {
				added = append(added, chain)
			}
		}
		if len(added) == 0 {
			continue
		}
		out, _ := exec.Command("iptables", "-w", "-t", table, "-S").Output()
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 4 || f[0] != "-A" || slices.Contains(added, f[1]) || f[len(f)-2] != "-j" || !slices.Contains(added, f[len(f)-1]) {
				continue
			}
			// The rule as iptables printed it, its quoted comment
			// ("CNI firewall plugin rules") one argument: the shell
			// splits it as iptables-restore would.
			_ = exec.Command("sh", "-c", "iptables -w -t "+table+" -D "+strings.TrimPrefix(l, "-A ")).Run()
		}
		for _, c := range added {
			_ = exec.Command("iptables", "-w", "-t", table, "-F", c).Run()
		}
		for _, c := range added {
			_ = exec.Command("iptables", "-w", "-t", table, "-X", c).Run()
		}
	}
}
