// Package abort ends a request by panicking with a problem (its NoReturn
// fact reaches txutil).
package abort

import "fmt"

// Problem is what a handler's recover turns into a response.
type Problem struct {
	Status int
	Detail string
}

// With panics with a problem: it never returns.
func With(status int, err error) {
	p := Problem{Status: status, Detail: err.Error()}
	panic(fmt.Sprint(p))
}
