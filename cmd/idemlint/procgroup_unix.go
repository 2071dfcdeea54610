//go:build unix

package main

import (
	"context"
	"os/exec"
	"syscall"
)

// cancelGroup makes a cancellable command (the language server's go list)
// run in a process group of its own, killed whole when ctx ends: go list's
// compilers would outlive it otherwise. A command that cannot be cancelled
// (the command line's) stays in the terminal's group, so that Ctrl-C
// reaches it.
func cancelGroup(ctx context.Context, cmd *exec.Cmd) {
	if ctx.Done() == nil {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
