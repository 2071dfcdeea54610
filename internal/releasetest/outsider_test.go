//go:build unix

package releasetest

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/internal/version"
)

// testVersion is the version the packed module is served at.
const testVersion = "v0.0.0-test"

// tools are the commands a user installs, with the arguments that make each
// print its version.
var tools = []struct {
	pkg  string
	args []string
}{
	{"cmd/idemlint", []string{"-version"}},
	{"cmd/idemgen", []string{"-version"}},
	{"cmd/idemctl", []string{"version"}},
}

// service is a user's module: it requires idem at testVersion, generates
// its wrapper with idemgen under go generate, and uses the runtime, the
// memory store, the PostgreSQL store (the local op's wrapper calls
// pgstore.DoTx) and the HTTP middleware.
var service = map[string]string{
	"go.mod": "module example.com/outsider\n\ngo 1.26\n\nrequire github.com/idemkit/idem " + testVersion + "\n",
	"pay.go": `package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

//go:generate go run github.com/idemkit/idem/cmd/idemgen

// Payments charges cards and records orders.
//
//idem:service
type Payments interface {
	//idem:op key=req.Key effect=remote lease=1s ttl=1h
	Charge(ctx context.Context, req ChargeRequest) (Receipt, error)

	//idem:op key=req.OrderID effect=local
	CreateOrder(ctx context.Context, tx pgx.Tx, req OrderRequest) (Order, error)
}

type ChargeRequest struct {
	Key   string ` + "`json:\"key\"`" + `
	Cents int64  ` + "`json:\"cents\"`" + `
}

type Receipt struct {
	ChargeID string ` + "`json:\"charge_id\"`" + `
}

type OrderRequest struct {
	OrderID string ` + "`json:\"order_id\"`" + `
}

type Order struct {
	OrderID string ` + "`json:\"order_id\"`" + `
}

// payments counts the charges it makes.
type payments struct{ charges int }

func (p *payments) Charge(ctx context.Context, req ChargeRequest) (Receipt, error) {
	p.charges++
	return Receipt{ChargeID: fmt.Sprintf("ch_%d", p.charges)}, nil
}

func (p *payments) CreateOrder(ctx context.Context, tx pgx.Tx, req OrderRequest) (Order, error) {
	return Order{OrderID: req.OrderID}, nil
}
`,
	"main.go": `package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/idemkit/idem/runtime"
	"github.com/idemkit/idem/runtime/idemhttp"
	"github.com/idemkit/idem/runtime/memstore"
)

func main() {
	rt, err := runtime.New(memstore.New())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	inner := &payments{}
	p := NewIdempotentPayments(inner, rt)
	var got []string
	for range 3 {
		r, err := p.Charge(context.Background(), ChargeRequest{Key: "k-1", Cents: 100})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		got = append(got, r.ChargeID)
	}
	_ = idemhttp.Middleware(rt)(http.NotFoundHandler())
	fmt.Printf("charges %d, receipts %v\n", inner.charges, got)
}
`,
}

// TestOutsiderInstall installs the tools and builds a service against the
// committed module, as someone outside this repository does (see the
// package documentation).
func TestOutsiderInstall(t *testing.T) {
	start := time.Now()
	step := func(what string, since time.Time) {
		t.Logf("%s: %v", what, time.Since(since).Round(10*time.Millisecond))
	}

	root := repoRoot(t)
	work := t.TempDir()
	proxy := filepath.Join(work, "proxy")
	t0 := time.Now()
	packModule(t, root, proxy)
	step("packed HEAD as "+version.Module+"@"+testVersion, t0)

	env, modcache := outsiderEnv(t, work, proxy)
	empty := filepath.Join(work, "empty") // no go.mod anywhere above it but /tmp's
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}

	t0 = time.Now()
	install := []string{"install"}
	for _, tool := range tools {
		install = append(install, version.Module+"/"+tool.pkg+"@"+testVersion)
	}
	goCmd(t, env, empty, install...)
	step("go install of the three tools", t0)
	for _, tool := range tools {
		name := filepath.Base(tool.pkg)
		out := run(t, env, empty, filepath.Join(work, "bin", name), tool.args...)
		if want := name + " " + testVersion + " go1."; !strings.HasPrefix(out, want) {
			t.Errorf("%s %s: %q, want it to start with %q", name, strings.Join(tool.args, " "), out, want)
		}
	}
	// go vet's handshake is still the analysis driver's (what go vet
	// -vettool runs is tested in cmd/idemlint).
	if out := run(t, env, empty, filepath.Join(work, "bin", "idemlint"), "-V=full"); !strings.Contains(out, "idemlint version devel comments-go-here buildID=") {
		t.Errorf("idemlint -V=full: %q", out)
	}

	svc := filepath.Join(work, "svc")
	for name, content := range service {
		writeFile(t, filepath.Join(svc, name), content)
	}
	t0 = time.Now()
	goCmd(t, env, svc, "generate", "./...")
	step("go generate (go run idemgen) in the service", t0)
	gen, err := os.ReadFile(filepath.Join(svc, "payments_idem.go"))
	if err != nil || !bytes.HasPrefix(gen, []byte("// Code generated by idemgen. DO NOT EDIT.")) {
		t.Fatalf("go generate wrote no payments_idem.go: %v\n%.300s", err, gen)
	}
	// idemgen as the service's dependency knows its version too.
	if out := goCmd(t, env, svc, "run", version.Module+"/cmd/idemgen", "-version"); !strings.HasPrefix(out, "idemgen "+testVersion+" ") {
		t.Errorf("go run idemgen -version in the service: %q", out)
	}
	t0 = time.Now()
	bin := filepath.Join(work, "bin", "svc")
	goCmd(t, env, svc, "build", "-o", bin, ".")
	step("go build of the service", t0)
	if out, want := run(t, env, svc, bin), "charges 1, receipts [ch_1 ch_1 ch_1]\n"; out != want {
		t.Errorf("the service printed %q, want %q", out, want)
	}
	// The module came from the proxy, at the test version, unreplaced.
	var m struct {
		Version string
		Dir     string
		Replace *struct{ Path string }
	}
	if err := json.Unmarshal([]byte(goCmd(t, env, svc, "list", "-m", "-json", version.Module)), &m); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(modcache, filepath.FromSlash(version.Module)+"@"+testVersion); m.Version != testVersion || m.Replace != nil || m.Dir != want {
		t.Errorf("the service's idem: %+v, want %s in %s", m, testVersion, want)
	}
	step("total", start)
}

// repoRoot is the root of the git checkout holding this package, which
// must be idem's module root.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := goruntime.Caller(0)
	out, err := exec.Command("git", "-C", filepath.Dir(file), "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the module is packed from git's HEAD, as a tag would publish it: run this test in a git clone (%v)", err)
	}
	root := strings.TrimSpace(string(out))
	if gomod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(gomod, []byte("module "+version.Module+"\n")) {
		t.Fatalf("%s is not the root of %s: %v", root, version.Module, err)
	}
	return root
}

// packModule writes a file-system module proxy at dir serving
// version.Module at testVersion: the files committed at HEAD (git archive,
// as the go command and the module proxy take a tag), in a zip made by
// golang.org/x/mod/zip, which leaves out nested modules and checks names
// and sizes as the go command does.
func packModule(t *testing.T, root, dir string) {
	t.Helper()
	var archive bytes.Buffer
	cmd := exec.Command("git", "-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", "HEAD")
	var stderr bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, &archive, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("git archive HEAD: %v\n%s", err, stderr.Bytes())
	}
	zr, err := zip.NewReader(bytes.NewReader(archive.Bytes()), int64(archive.Len()))
	if err != nil {
		t.Fatal(err)
	}
	var files []modzip.File
	var gomod []byte
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		files = append(files, archived{f})
		if f.Name == "go.mod" {
			gomod = readAll(t, f)
		}
	}
	var z bytes.Buffer
	if err := modzip.Create(&z, module.Version{Path: version.Module, Version: testVersion}, files); err != nil {
		t.Fatalf("packing the module: %v", err)
	}
	commitTime, err := exec.Command("git", "-C", root, "log", "-1", "--format=%cI", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := time.Parse(time.RFC3339, strings.TrimSpace(string(commitTime)))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{testVersion, ts.UTC()})
	at := filepath.Join(dir, filepath.FromSlash(version.Module), "@v")
	writeFile(t, filepath.Join(at, "list"), testVersion+"\n")
	writeFile(t, filepath.Join(at, testVersion+".info"), string(info))
	writeFile(t, filepath.Join(at, testVersion+".mod"), string(gomod))
	writeFile(t, filepath.Join(at, testVersion+".zip"), z.String())
}

// archived is a file of git's archive as golang.org/x/mod/zip takes it.
type archived struct{ f *zip.File }

func (a archived) Path() string                 { return a.f.Name }
func (a archived) Lstat() (fs.FileInfo, error)  { return a.f.FileInfo(), nil }
func (a archived) Open() (io.ReadCloser, error) { return a.f.Open() }

func readAll(t *testing.T, f *zip.File) []byte {
	t.Helper()
	r, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outsiderEnv is the environment of a user with an empty GOPATH who
// reaches idem only through the proxy at proxy. What the machine's go
// command would read from its own settings (GOENV, GOFLAGS, GOWORK, ...) is
// left out.
//
// The build and module caches are the machine's, so that only idem's
// packages are compiled (the standard library and the dependencies are
// shared with every other build, at the same paths): a fresh module cache
// compiled them again, 200 s of CPU on a cold cache. The module cache
// never holds this checkout, and the copy of idem at testVersion is removed
// before and after the test (see claimTestVersion).
func outsiderEnv(t *testing.T, work, proxy string) (env []string, modcache string) {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPROXY", "GOSUMDB").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	vals := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(vals) != 4 || vals[1] == "" {
		t.Fatalf("go env: %q", out)
	}
	gocache, goproxy, gosumdb := vals[0], vals[2], vals[3]
	modcache = vals[1]
	claimTestVersion(t, modcache)
	proxies := []string{"file://" + filepath.ToSlash(proxy)}
	if goproxy != "" && goproxy != "off" {
		proxies = append(proxies, goproxy)
	}
	drop := map[string]bool{}
	for _, k := range []string{"GOENV", "GOFLAGS", "GOPATH", "GOMODCACHE", "GOBIN", "GOWORK", "GOCACHE", "GOPROXY",
		"GONOPROXY", "GONOSUMDB", "GOPRIVATE", "GOSUMDB", "GOINSECURE", "GOTOOLCHAIN", "GO111MODULE", "GODEBUG"} {
		drop[k] = true
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			env = append(env, kv)
		}
	}
	return append(env,
		"GOENV=off",
		"GOFLAGS="+testenv.ChildGoFlags("-mod=mod"),
		"GOPATH="+filepath.Join(work, "gopath"),
		"GOMODCACHE="+modcache,
		"GOBIN="+filepath.Join(work, "bin"),
		"GOWORK=off",
		"GOCACHE="+gocache,
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB="+version.Module,
		"GOSUMDB="+gosumdb,
		"GOTOOLCHAIN=local",
		// The go command indexes a module of its cache once and trusts the
		// index from then on (modules there never change); this version
		// does, from run to run.
		"GODEBUG=goindex=0",
	), modcache
}

// claimTestVersion makes the module cache at modcache hold no copy of idem
// at testVersion, now and when the test ends, so that the go command takes
// this run's zip from the proxy (it never downloads a version it has). An
// exclusive lock on a file of the cache keeps two runs of the test (two
// checkouts on one machine) from sharing the version; the second waits.
func claimTestVersion(t *testing.T, modcache string) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(modcache, "cache", "idem-releasetest.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking %s: %v", lock.Name(), err)
	}
	escaped, err := module.EscapePath(version.Module)
	if err != nil {
		t.Fatal(err)
	}
	remove := func() {
		extracted := filepath.Join(modcache, filepath.FromSlash(escaped)+"@"+testVersion)
		// The go command makes the files it extracts read-only.
		_ = filepath.WalkDir(extracted, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				err = os.Chmod(p, 0o755)
			}
			return err
		})
		if err := os.RemoveAll(extracted); err != nil {
			t.Errorf("removing %s: %v", extracted, err)
		}
		dl := filepath.Join(modcache, "cache", "download", filepath.FromSlash(escaped), "@v")
		files, _ := filepath.Glob(filepath.Join(dl, testVersion+".*"))
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Errorf("removing %s: %v", f, err)
			}
		}
		// The list of versions the cache knows (read with GOPROXY=off).
		listFile := filepath.Join(dl, "list")
		if list, err := os.ReadFile(listFile); err == nil {
			var keep []string
			for _, v := range strings.Fields(string(list)) {
				if v != testVersion {
					keep = append(keep, v+"\n")
				}
			}
			if len(keep) == 0 {
				err = os.Remove(listFile)
			} else {
				err = os.WriteFile(listFile, []byte(strings.Join(keep, "")), 0o644)
			}
			if err != nil {
				t.Errorf("removing %s from %s: %v", testVersion, listFile, err)
			}
		}
	}
	remove()
	t.Cleanup(func() {
		remove()
		_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
		lock.Close()
	})
}

// goCmd runs the go command in dir and returns its standard output; it
// fails the test with both outputs if the command fails.
func goCmd(t *testing.T, env []string, dir string, args ...string) string {
	t.Helper()
	return run(t, env, dir, "go", args...)
}

func run(t *testing.T, env []string, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir = env, dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
