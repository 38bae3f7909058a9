// SPDX-License-Identifier: MIT
// A Go program linked with libc through cgo (so LD_PRELOAD applies): Go's
// runtime makes its own system calls on small goroutine stacks. Writes
// ARGV[1]/go.out and reads it back.
package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"os"
)

func main() {
	C.free(C.malloc(1))
	p := os.Args[1] + "/go.out"
	if err := os.WriteFile(p, []byte("written by go\n"), 0o644); err != nil {
		fmt.Println("write:", err)
		os.Exit(1)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		fmt.Println("read:", err)
		os.Exit(1)
	}
	fmt.Print(string(b))
}
