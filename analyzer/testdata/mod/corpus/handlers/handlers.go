// Package handlers binds the adapters and serves HTTP.
package handlers

import (
	"context"
	"net/http"

	"example.com/orm/corpus/adapters/events"
	"example.com/orm/corpus/adapters/firestorerepo"
	"example.com/orm/corpus/adapters/gateway"
	"example.com/orm/corpus/adapters/httpusers"
	"example.com/orm/corpus/adapters/lnd"
	"example.com/orm/corpus/adapters/mail"
	"example.com/orm/corpus/adapters/oauth"
	"example.com/orm/corpus/adapters/poppersist"
	"example.com/orm/corpus/adapters/redisrepo"
	"example.com/orm/corpus/adapters/sms"
	"example.com/orm/corpus/adapters/store"
	"example.com/orm/corpus/app/command"
	"example.com/orm/corpus/domain"
)

// New binds every adapter.
func New(s *command.Service, st *store.Store) *command.Service {
	s.Users = &httpusers.Client{HTTP: http.DefaultClient}
	s.OAuth = &oauth.Provider{HTTP: http.DefaultClient}
	s.LN = &lnd.Client{HTTP: http.DefaultClient}
	s.Mail = &mail.SMTP{}
	s.SMS = &sms.Twilio{HTTP: http.DefaultClient}
	s.Events = &events.HTTP{HTTP: http.DefaultClient}
	s.Gateway = &gateway.Client{HTTP: http.DefaultClient}
	s.Payments = st
	s.Keys = &redisrepo.Keys{RDB: s.RDB}
	s.Cache = &redisrepo.Cache{RDB: s.RDB}
	s.Orders = &firestorerepo.Orders{}
	s.Persister = &poppersist.Persister{Conn: s.Pop}
	s.Store = st
	return s
}

// Outbox is the other EventPublisher binding.
func Outbox(s *command.Service) { s.Events = &events.Outbox{} }

var _ domain.EventPublisher = (*events.Outbox)(nil)

// Charge serves POST /charge.
func Charge(s *command.Service) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := &domain.Payment{ID: r.FormValue("id")}
		if err := s.GormTransactionNotify(context.WithoutCancel(r.Context()), p); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	}
}
