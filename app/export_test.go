package app

// NewWithModules is New with the given modules instead of Modules(): tests run
// the service with a spec of their own.
var NewWithModules = newService
