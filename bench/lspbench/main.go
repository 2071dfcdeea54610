// Command lspbench drives `idemlint lsp` as an editor does and measures
// it (bench/lsp.sh runs it): the time from initialize to the first
// diagnostics of an opened file, the time from a one-line edit and save
// of another file to that file's fresh diagnostics, over a session of
// edits, with the CPU the server (and the go list it runs) spent on each
// save, and the server's peak resident memory (VmHWM, read before
// shutdown).
//
//	lspbench -server idemlint -dir MODULE -open apis/x.go -edit examples/base/main.go -edits 50
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	server := flag.String("server", "idemlint", "the idemlint binary")
	dir := flag.String("dir", ".", "the module (the workspace folder)")
	open := flag.String("open", "", "the file opened first, relative to -dir")
	edit := flag.String("edit", "", "the file edited and saved, relative to -dir")
	edits := flag.Int("edits", 50, "how many edits")
	options := flag.String("options", "null", "initializationOptions, JSON")
	flag.Parse()
	if err := run(*server, *dir, *open, *edit, *edits, json.RawMessage(*options)); err != nil {
		fmt.Fprintln(os.Stderr, "lspbench:", err)
		os.Exit(1)
	}
}

type msg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		URI string `json:"uri"`
	} `json:"params"`
}

func run(server, dir, open, edit string, edits int, options json.RawMessage) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	cmd := exec.Command(server, "lsp")
	cmd.Dir = dir
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	msgs := make(chan msg, 1024)
	go func() {
		defer close(msgs)
		r := bufio.NewReader(stdout)
		for {
			n := -1
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimSpace(line)
				if line == "" {
					break
				}
				if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
					n, _ = strconv.Atoi(v)
				}
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			var m msg
			if json.Unmarshal(body, &m) == nil {
				msgs <- m
			}
		}
	}()
	id := 0
	send := func(method string, params any, request bool) {
		m := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
		if request {
			id++
			m["id"] = id
		}
		data, _ := json.Marshal(m)
		fmt.Fprintf(stdin, "Content-Length: %d\r\n\r\n%s", len(data), data)
	}
	wait := func(match func(msg) bool) error {
		timeout := time.After(10 * time.Minute)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					return fmt.Errorf("the server exited")
				}
				if match(m) {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("no answer in 10 minutes")
			}
		}
	}
	uri := func(rel string) string {
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(dir, rel))}).String()
	}
	published := func(u string) func(msg) bool {
		return func(m msg) bool { return m.Method == "textDocument/publishDiagnostics" && m.Params.URI == u }
	}
	didOpen := func(rel string) error {
		text, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return err
		}
		send("textDocument/didOpen", map[string]any{"textDocument": map[string]any{"uri": uri(rel), "languageId": "go", "version": 1, "text": string(text)}}, false)
		return nil
	}

	t0 := time.Now()
	send("initialize", map[string]any{"processId": os.Getpid(), "rootUri": uri("."), "capabilities": map[string]any{},
		"workspaceFolders": []map[string]string{{"uri": uri("."), "name": filepath.Base(dir)}}, "initializationOptions": options}, true)
	send("initialized", map[string]any{}, false)
	if err := didOpen(open); err != nil {
		return err
	}
	if err := wait(published(uri(open))); err != nil {
		return err
	}
	fmt.Printf("first diagnostics of %s: %.2fs\n", open, time.Since(t0).Seconds())

	path := filepath.Join(dir, edit)
	orig, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	defer os.WriteFile(path, orig, 0o644)
	if err := didOpen(edit); err != nil {
		return err
	}
	if err := wait(published(uri(edit))); err != nil {
		return err
	}
	var times, cpus []float64
	for i := range edits {
		text := orig
		if i%2 == 0 {
			text = append(slices.Clone(orig), fmt.Sprintf("\nvar _ = %d // lspbench edit\n", i)...)
		}
		if err := os.WriteFile(path, text, 0o644); err != nil {
			return err
		}
		t, c := time.Now(), cpuTime(cmd.Process.Pid)
		send("textDocument/didSave", map[string]any{"textDocument": map[string]any{"uri": uri(edit)}}, false)
		if err := wait(published(uri(edit))); err != nil {
			return err
		}
		times = append(times, time.Since(t).Seconds())
		cpus = append(cpus, cpuTime(cmd.Process.Pid)-c)
	}
	hwm := "?"
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				hwm = strconv.Itoa(kb/1024) + "MB"
			}
		}
	}
	if len(times) > 0 {
		slices.Sort(times)
		fmt.Printf("edit+save of %s to fresh diagnostics, %d edits: median %.2fs, min %.2fs, max %.2fs\n",
			edit, len(times), times[len(times)/2], times[0], times[len(times)-1])
		if cpus[0] >= 0 {
			slices.Sort(cpus)
			fmt.Printf("  server CPU per save (its own and its go list's): median %.2fs, min %.2fs, max %.2fs\n",
				cpus[len(cpus)/2], cpus[0], cpus[len(cpus)-1])
		}
	}
	fmt.Printf("server peak RSS (VmHWM) over the session: %s\n", hwm)
	send("shutdown", nil, true)
	if err := wait(func(m msg) bool { return string(m.ID) == strconv.Itoa(id) }); err != nil {
		return err
	}
	send("exit", nil, false)
	return cmd.Wait()
}

// cpuTime is the CPU time, user and system, of process pid and of its
// children that it has waited for (the server's go list), in seconds,
// from /proc/pid/stat; -1 where there is none (not Linux). Unlike wall
// time, it does not grow with the load of a shared machine.
func cpuTime(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name, which is in parentheses and
	// may hold spaces: utime, stime, cutime and cstime are the 14th to
	// 17th fields of the line, the 12th to 15th after it.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return -1
	}
	var ticks float64
	for _, f := range fields[11:15] {
		n, _ := strconv.ParseFloat(f, 64)
		ticks += n
	}
	return ticks / 100 // USER_HZ, 100 on Linux
}
