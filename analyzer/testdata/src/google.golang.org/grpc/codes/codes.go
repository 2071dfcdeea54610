// Package codes is a minimal stub of google.golang.org/grpc/codes.
package codes

type Code uint32

const (
	OK               Code = 0
	Canceled         Code = 1
	Unknown          Code = 2
	InvalidArgument  Code = 3
	DeadlineExceeded Code = 4
	NotFound         Code = 5
	AlreadyExists    Code = 6
	Unavailable      Code = 14
)
