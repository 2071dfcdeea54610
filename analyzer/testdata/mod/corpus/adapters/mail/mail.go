// Package mail implements domain.Mailer over SMTP.
package mail

import (
	"context"
	"net/smtp"
)

type SMTP struct{ Addr string }

func (m *SMTP) SendMail(ctx context.Context, to, body string) error {
	return smtp.SendMail(m.Addr, nil, "noreply@example.com", []string{to}, []byte(body))
}
