package app

// NewWithModules is New with the given modules instead of Modules(): tests run
// the service with a spec of their own.
var NewWithModules = newService

// NewBrokerWithDB is serve's broker factory: NewBroker with the database
// (the RabbitMQ attempt ledger's).
var NewBrokerWithDB = newBroker

// UncountedCrashQueues are the queues serve warns about at start.
var UncountedCrashQueues = uncountedCrashQueues

// NewVerifier is serve's verifier of the admin JWTs, from the admin section
// and an environment.
var NewVerifier = newVerifier
