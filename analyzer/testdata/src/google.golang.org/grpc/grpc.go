// Package grpc is a minimal stub of google.golang.org/grpc.
package grpc

import "context"

type CallOption interface{ before() error }

type DialOption interface{ apply() }

type ClientStream interface {
	SendMsg(m any) error
	RecvMsg(m any) error
}

type StreamDesc struct{ StreamName string }

// ClientConnInterface is what generated client stubs use.
type ClientConnInterface interface {
	Invoke(ctx context.Context, method string, args any, reply any, opts ...CallOption) error
	NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error)
}

type ClientConn struct{}

func NewClient(target string, opts ...DialOption) (*ClientConn, error) { return &ClientConn{}, nil }

func (cc *ClientConn) Invoke(ctx context.Context, method string, args, reply any, opts ...CallOption) error {
	return nil
}
func (cc *ClientConn) NewStream(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error) {
	return nil, nil
}
func (cc *ClientConn) Close() error { return nil }
