// Package lightning declares the mint's Lightning backend.
package lightning

// Payment is the outcome of a payment.
type Payment struct {
	State      string
	CheckingID string
}

// Backend pays and checks invoices.
type Backend interface {
	PayInvoice(invoice string, amount int64) (Payment, error)
	CheckPayed(quote, checkingID string) (string, error)
}
