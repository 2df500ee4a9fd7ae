// Package compose holds the Docker Compose setup for local development, not
// Go code: docker-compose.yml runs RabbitMQ (with its management UI),
// PostgreSQL and the fauxqs SQS emulator at the addresses the tests use, and
// eventpipe.yaml is an eventpipe configuration for those services.
//
//	make up      # docker compose -f compose/docker-compose.yml up -d --wait
//	make down    # docker compose -f compose/docker-compose.yml down
//
// Machines without a Docker engine (CI among them) cannot start the services,
// so the package's test parses and checks both files instead.
package compose
