package app

import (
	"github.com/eventpipe/eventpipe/app/broker/postgres"
	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/config"
)

// NativeQueueName is the name the topology queue queue has on the broker cfg
// configures: the same name on the memory broker and RabbitMQ, the mapped
// SQS queue name with sqs.queue_prefix on SQS (sqs.QueueName, decision
// 0018), and the schema-qualified table on PostgreSQL. It is what
// `eventpipe topology list` prints, from the same functions the adapters
// name their objects with.
func NativeQueueName(cfg config.Config, queue string) string {
	switch cfg.Broker.Kind {
	case config.KindSQS:
		return sqs.QueueName(cfg.SQS.QueuePrefix, queue)
	case config.KindPostgres:
		return postgres.QueueTable(cfg.Postgres.Schema, queue)
	default:
		return queue
	}
}
