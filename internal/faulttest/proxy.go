// Package faulttest injects network faults between the runtime and a real
// store, for the store packages' tests: an in-process toxiproxy on loopback
// in front of the test PostgreSQL or Redis, a workload of concurrent
// duplicates with a fenced downstream, and the invariants they must keep.
//
// It is imported by test files only, so toxiproxy never enters the build of
// a program that uses idem.
package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy proxy running in this process, listening on a
// loopback port and forwarding to an upstream server.
type Proxy struct {
	p  *toxiproxy.Proxy
	mu sync.Mutex
	on map[string]bool // toxics installed
}

var (
	serverOnce sync.Once
	server     *toxiproxy.ApiServer
)

// NewProxy starts a proxy to upstream ("host:port") on 127.0.0.1 and stops it
// when the test ends. Toxics act on the connections through it, already open
// or new, from the moment they are added until they are removed.
func NewProxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	serverOnce.Do(func() {
		server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("starting the proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{p: p, on: map[string]bool{}}
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.p.Listen }

// HostPort returns the host and port of Addr.
func (p *Proxy) HostPort() (string, uint16) {
	host, port, _ := net.SplitHostPort(p.Addr())
	var n uint16
	_, _ = fmt.Sscan(port, &n)
	return host, n
}

// Toxic is one toxiproxy toxic: Type is latency, timeout, reset_peer,
// limit_data, slicer, ...; Stream is "upstream" (client to server) or
// "downstream" (server to client); Attributes are the type's (milliseconds
// and bytes, as toxiproxy documents them).
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

func (x Toxic) String() string {
	var attrs []string
	for k, v := range x.Attributes {
		attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
	}
	return fmt.Sprintf("%s/%s(%s)", x.Type, x.Stream, strings.Join(attrs, ","))
}

// Add installs a toxic (toxicity 1 unless set); adding one already
// installed does nothing.
func (p *Proxy) Add(x Toxic) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on[x.Name] {
		return nil
	}
	if x.Toxicity == 0 {
		x.Toxicity = 1
	}
	b, err := json.Marshal(x)
	if err != nil {
		return err
	}
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("adding toxic %v: %w", x, err)
	}
	p.on[x.Name] = true
	return nil
}

// Remove takes a toxic away; removing one not installed does nothing.
func (p *Proxy) Remove(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on[name] {
		return
	}
	_ = p.p.Toxics.RemoveToxic(context.Background(), name)
	delete(p.on, name)
}
