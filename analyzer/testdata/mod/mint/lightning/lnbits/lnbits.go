// Package lnbits implements lightning.Backend over LNbits' HTTP API.
package lnbits

import (
	"encoding/json"
	"net/http"
	"strings"

	"example.com/orm/mint/lightning"
)

type LNbits struct {
	URL    string
	Client *http.Client
}

func (l LNbits) PayInvoice(invoice string, amount int64) (lightning.Payment, error) {
	resp, err := l.Client.Post(l.URL+"/api/v1/payments", "application/json", strings.NewReader(`{"out":true,"bolt11":"`+invoice+`"}`))
	if err != nil {
		return lightning.Payment{}, err
	}
	defer resp.Body.Close()
	var p lightning.Payment
	return p, json.NewDecoder(resp.Body).Decode(&p)
}

func (l LNbits) CheckPayed(quote, checkingID string) (string, error) {
	resp, err := l.Client.Get(l.URL + "/api/v1/payments/" + checkingID)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ Paid bool }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	if out.Paid {
		return "SETTLED", nil
	}
	return "PENDING", nil
}
