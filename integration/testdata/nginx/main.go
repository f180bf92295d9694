// Command nginx stands in for nginx in the critest images that
// hack/mkimage-critest.sh builds (registry.k8s.io/e2e-test-images/nginx,
// gcr.io/k8s-staging-cri-tools/hostnet-nginx-*): what critest asks of
// nginx and nothing more. It titles itself as nginx's master process
// ("nginx: master process nginx -g daemon off;" in /proc/PID/cmdline),
// writes its pid to /var/run/nginx.pid, and serves /usr/share/nginx/html
// on the port of the first `listen N;` in /etc/nginx/conf.d/default.conf
// (80 without one) until SIGTERM, SIGINT or SIGQUIT.
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

const title = "nginx: master process "

func main() {
	if !strings.HasPrefix(os.Args[0], title) {
		// Re-exec under nginx's process title: the same pid, the same
		// binary (its comm stays "nginx", what pidof matches).
		exe, err := os.Executable()
		if err == nil {
			argv := []string{title + strings.Join(append([]string{"nginx"}, os.Args[1:]...), " ")}
			err = syscall.Exec(exe, argv, os.Environ())
		}
		fmt.Fprintf(os.Stderr, "nginx: re-exec as master: %v\n", err)
		os.Exit(1)
	}
	port := listenPort("/etc/nginx/conf.d/default.conf")
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nginx: listen: %v\n", err)
		os.Exit(1)
	}
	if err := os.MkdirAll("/var/run", 0o755); err == nil {
		err = os.WriteFile("/var/run/nginx.pid", []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nginx: pid file: %v\n", err)
		}
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	go func() {
		<-stop
		os.Exit(0)
	}()
	fmt.Printf("nginx: serving /usr/share/nginx/html on :%d\n", port)
	err = http.Serve(ln, http.FileServer(http.Dir("/usr/share/nginx/html")))
	fmt.Fprintf(os.Stderr, "nginx: serve: %v\n", err)
	os.Exit(1)
}

// listenPort is the port of the first "listen N;" directive in conf, or 80.
func listenPort(conf string) int {
	f, err := os.Open(conf)
	if err != nil {
		return 80
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimSuffix(strings.TrimSpace(sc.Text()), ";"))
		if len(fields) == 2 && fields[0] == "listen" {
			if p, err := strconv.Atoi(fields[1]); err == nil && p > 0 && p < 65536 {
				return p
			}
		}
	}
	return 80
}
