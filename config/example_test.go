package config_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/eventpipe/eventpipe/config"
)

// Load layers a file and the environment over the defaults. The environment
// is passed in (os.Environ() in a real program), so tests control it.
func ExampleLoad() {
	cfg, err := config.Load("", []string{
		"EVENTPIPE_BROKER=sqs",
		"EVENTPIPE_SQS_ENDPOINT=http://127.0.0.1:9324",
		"EVENTPIPE_SQS_BATCH_SIZE=5",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Broker.Kind, cfg.SQS.Endpoint, cfg.SQS.BatchSize, cfg.SQS.WaitTime)
	// Output: sqs http://127.0.0.1:9324 5 20s
}

// Every problem is reported at once, each with its YAML path and where the
// bad value came from.
func ExampleValidationError() {
	f, _ := os.CreateTemp("", "eventpipe-*.yaml")
	defer os.Remove(f.Name())
	fmt.Fprint(f, "sqs:\n  batchsize: 5\nlog:\n  level: loud\n")
	f.Close()

	_, err := config.Load(f.Name(), []string{"EVENTPIPE_BROKER=kafka"})
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Printf("%s: %s\n", p.Path, p.Message)
		}
	}
	// Output:
	// sqs.batchsize: unknown key; did you mean batch_size?
	// broker.kind: "kafka" is not one of memory, rabbitmq, sqs, postgres
	// log.level: "loud" is not one of debug, info, warn, error
}

// EnvVars is the source of the configuration reference.
func ExampleEnvVars() {
	for _, v := range config.EnvVars()[:3] {
		fmt.Printf("%-30s %-8s default %q\n", v.Name, v.Type, v.Default)
	}
	// Output:
	// EVENTPIPE_BROKER_KIND          string   default "memory"
	// EVENTPIPE_MEMORY_OUTPUT_BUFFER int      default "256"
	// EVENTPIPE_MEMORY_PREFETCH      int      default "16"
}
