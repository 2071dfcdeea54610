//go:build goexperiment.jsonv2

package jsonfast

// Enabled: no plans. Under GOEXPERIMENT=jsonv2, encoding/json runs on
// encoding/json/v2 and writes other bytes than the classic encoder the
// plans reproduce (invalid UTF-8 as a raw U+FFFD, other tag parsing): a
// plan would then disagree with json.Marshal, and so with DoTx's encoding,
// other builds of the same service and the records they stored. Every type
// goes to encoding/json.
const Enabled = false
