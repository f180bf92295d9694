// Command gvx-pause is the init of a gvx warm-pool sandbox's root
// container: it holds the sandbox open until it is told to stop
// (SIGTERM, SIGINT or SIGHUP), and reaps nothing because it starts nothing.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	<-ch
}
