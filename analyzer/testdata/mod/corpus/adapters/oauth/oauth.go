// Package oauth implements domain.OAuthProvider over HTTP.
package oauth

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

type Provider struct {
	HTTP   *http.Client
	Issuer string
}

// Discover reads the OIDC discovery document.
func (p *Provider) Discover(ctx context.Context) (string, error) {
	resp, err := p.HTTP.Get(p.Issuer + "/.well-known/openid-configuration")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Exchange trades a code for a token.
func (p *Provider) Exchange(ctx context.Context, code string) (string, error) {
	resp, err := p.HTTP.PostForm(p.Issuer+"/token", url.Values{"code": {code}})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
