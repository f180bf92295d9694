// Command euid prints its effective uid the way critest's nonewprivs image
// does ("Effective uid: N"). Installed set-user-ID root in a test image, it
// shows whether an exec may raise a process's ids.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
