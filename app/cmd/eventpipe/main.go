// Command eventpipe runs asynchronous-messaging specs on memory, RabbitMQ, SQS
// or PostgreSQL. See `eventpipe --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/eventpipe/eventpipe/app/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Environ())
	stop()
	os.Exit(code)
}
