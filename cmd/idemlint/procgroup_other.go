//go:build !unix

package main

import (
	"context"
	"os/exec"
)

// cancelGroup: elsewhere, cancelling kills go list alone.
func cancelGroup(context.Context, *exec.Cmd) {}
