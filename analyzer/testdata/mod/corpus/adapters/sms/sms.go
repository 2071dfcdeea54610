// Package sms implements domain.SMSSender over Twilio's HTTP API.
package sms

import (
	"context"
	"net/http"
	"net/url"
)

type Twilio struct {
	HTTP *http.Client
	URL  string
}

func (t *Twilio) SendSMS(ctx context.Context, to, body string) error {
	resp, err := t.HTTP.PostForm(t.URL+"/Messages.json", url.Values{"To": {to}, "Body": {body}})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
