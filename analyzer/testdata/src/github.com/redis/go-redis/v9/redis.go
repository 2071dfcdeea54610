// Package redis is a minimal stub of github.com/redis/go-redis/v9: commands
// are methods of the unexported cmdable that Client embeds, as upstream.
package redis

import (
	"context"
	"time"
)

type Cmder interface{ Err() error }

type baseCmd struct{ err error }

func (c *baseCmd) Err() error { return c.err }

type StringCmd struct{ baseCmd }

func (c *StringCmd) Result() (string, error) { return "", c.err }
func (c *StringCmd) Val() string             { return "" }

type IntCmd struct{ baseCmd }

func (c *IntCmd) Result() (int64, error) { return 0, c.err }
func (c *IntCmd) Val() int64             { return 0 }

type BoolCmd struct{ baseCmd }

func (c *BoolCmd) Result() (bool, error) { return false, c.err }
func (c *BoolCmd) Val() bool             { return false }

type StatusCmd struct{ baseCmd }

func (c *StatusCmd) Result() (string, error) { return "", c.err }

type MapStringStringCmd struct{ baseCmd }

func (c *MapStringStringCmd) Result() (map[string]string, error) { return nil, c.err }

type Cmd struct{ baseCmd }

func (c *Cmd) Result() (any, error) { return nil, c.err }

type SetArgs struct {
	Mode string // NX or XX
	TTL  time.Duration
}

const Nil = RedisError("redis: nil")

type RedisError string

func (e RedisError) Error() string { return string(e) }

type Cmdable interface {
	Get(ctx context.Context, key string) *StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *StatusCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *BoolCmd
	SetArgs(ctx context.Context, key string, value any, a SetArgs) *StatusCmd
	Del(ctx context.Context, keys ...string) *IntCmd
	Unlink(ctx context.Context, keys ...string) *IntCmd
	GetDel(ctx context.Context, key string) *StringCmd
	Exists(ctx context.Context, keys ...string) *IntCmd
	HSet(ctx context.Context, key string, values ...any) *IntCmd
	HGet(ctx context.Context, key, field string) *StringCmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *Cmd
	Pipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error)
}

type Pipeliner interface {
	Cmdable
	Exec(ctx context.Context) ([]Cmder, error)
}

type cmdable func(ctx context.Context, cmd Cmder) error

func (c cmdable) Get(ctx context.Context, key string) *StringCmd { return &StringCmd{} }
func (c cmdable) Set(ctx context.Context, key string, value any, expiration time.Duration) *StatusCmd {
	return &StatusCmd{}
}
func (c cmdable) SetNX(ctx context.Context, key string, value any, expiration time.Duration) *BoolCmd {
	return &BoolCmd{}
}
func (c cmdable) SetArgs(ctx context.Context, key string, value any, a SetArgs) *StatusCmd {
	return &StatusCmd{}
}
func (c cmdable) Del(ctx context.Context, keys ...string) *IntCmd    { return &IntCmd{} }
func (c cmdable) Unlink(ctx context.Context, keys ...string) *IntCmd { return &IntCmd{} }
func (c cmdable) GetDel(ctx context.Context, key string) *StringCmd  { return &StringCmd{} }
func (c cmdable) Exists(ctx context.Context, keys ...string) *IntCmd { return &IntCmd{} }
func (c cmdable) HSet(ctx context.Context, key string, values ...any) *IntCmd {
	return &IntCmd{}
}
func (c cmdable) HGet(ctx context.Context, key, field string) *StringCmd { return &StringCmd{} }
func (c cmdable) HGetAll(ctx context.Context, key string) *MapStringStringCmd {
	return &MapStringStringCmd{}
}
func (c cmdable) Eval(ctx context.Context, script string, keys []string, args ...any) *Cmd {
	return &Cmd{}
}

type Options struct{ Addr string }

type Client struct {
	cmdable
	opt *Options
}

func NewClient(opt *Options) *Client {
	c := &Client{opt: opt}
	c.cmdable = c.process
	return c
}

func (c *Client) process(ctx context.Context, cmd Cmder) error { return nil }

func (c *Client) Pipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error) {
	return nil, nil
}
func (c *Client) Close() error { return nil }

// Tx is a WATCH transaction: reads inside it are checked again at EXEC.
type Tx struct{ cmdable }

func (c *Client) Watch(ctx context.Context, fn func(*Tx) error, keys ...string) error {
	return fn(&Tx{cmdable: c.cmdable})
}

func (c *Tx) TxPipelined(ctx context.Context, fn func(Pipeliner) error) ([]Cmder, error) {
	return nil, nil
}
