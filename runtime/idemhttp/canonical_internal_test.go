package idemhttp

import "testing"

func TestCanonicalHost(t *testing.T) {
	tests := []struct {
		host string
		tls  bool
		want string
	}{
		{"api.example", false, "api.example"},
		{"API.Example", false, "api.example"},
		{"api.example.", false, "api.example"},
		{"api.example:80", false, "api.example"},
		{"api.example:80", true, "api.example:80"},
		{"api.example:443", true, "api.example"},
		{"api.example:443", false, "api.example:443"},
		{"api.example:", false, "api.example"},
		{"api.example:8080", false, "api.example:8080"},
		{"Bücher.example", false, "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", false, "xn--bcher-kva.example"},
		{"XN--BCHER-KVA.example.:80", false, "xn--bcher-kva.example"},
		{"[::1]:80", false, "[::1]"},
		{"[::1]:8080", false, "[::1]:8080"},
		{"[::1]", false, "[::1]"},
		{"127.0.0.1:80", false, "127.0.0.1"},
		{"my_host.internal", false, "my_host.internal"}, // not a DNS name IDNA accepts: lower-cased only
		{"MY_HOST.internal", false, "my_host.internal"},
		{"", false, ""},
	}
	for _, tc := range tests {
		if got := canonicalHost(tc.host, tc.tls); got != tc.want {
			t.Errorf("canonicalHost(%q, tls %v) = %q, want %q", tc.host, tc.tls, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalHost("api.example:8443", false) }); n != 0 {
		t.Errorf("a host in canonical form: %v allocations, want 0", n)
	}
}

func TestCanonicalEscapes(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/pay_now", "/pay_now"},
		{"/pay%5Fnow", "/pay_now"},
		{"/pay%5fnow", "/pay_now"},
		{"/%7Euser/%41%2d%2E", "/~user/A-."},
		{"/a%2fb", "/a%2Fb"},
		{"/a%2Fb", "/a%2Fb"},
		{"/caf%c3%a9", "/caf%C3%A9"},
		{"/a%20b?q=%5f%2b", "/a%20b?q=_%2B"},
		{"/100%", "/100%"},
		{"/100%2", "/100%2"},
		{"/%zz%5F", "/%zz_"},
	}
	for _, tc := range tests {
		if got := canonicalEscapes(tc.in); got != tc.want {
			t.Errorf("canonicalEscapes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalEscapes("/charges/c1?x=1") }); n != 0 {
		t.Errorf("a target without escapes: %v allocations, want 0", n)
	}
}

func TestCanonicalPath(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/pay", "/pay"},
		{"/x/./pay", "/x/pay"},
		{"/y/../pay", "/pay"},
		{"/a/b/.", "/a/b/"},
		{"/a/b/..", "/a/"},
		{"/..", "/"},
		{"/.", "/"},
		{"/x/../../y", "/y"},
		{"/a/%2E/b", "/a/b"},
		{"/a/%2e%2E/b", "/b"},
		{"/a/.b/..c/...", "/a/.b/..c/..."},
		{"/a//b/../c", "/a//c"},
		{"/caf%c3%a9/./x", "/caf%C3%A9/x"},
	} {
		if got := canonicalPath(tt.in); got != tt.want {
			t.Errorf("canonicalPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"?x=1", "/?x=1"},
		{"/x/./pay?a=./b", "/x/pay?a=./b"},
		{"/p?q=%7e", "/p?q=~"},
	} {
		if got := canonicalTarget(tt.in); got != tt.want {
			t.Errorf("canonicalTarget(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
