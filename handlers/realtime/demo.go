package realtime

import (
	_ "embed"
	"encoding/json"
	"html/template"
	"net/http"
)

//go:embed demo.html
var demoHTML string

//go:embed demo.js
var demoJS []byte

var demoPage = template.Must(template.New("demo").Parse(demoHTML))

// serveDemo serves a page that subscribes to a session channel with
// EventSource and lists events as they arrive. The session id comes from
// ?session=, the token from the fragment (#token=…, never sent to the
// server with the page) or a form.
func (s *Server) serveDemo(w http.ResponseWriter, _ *http.Request) {
	types, _ := json.Marshal(s.cfg.DemoEventTypes)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
	h.Set("Cache-Control", "no-store")
	_ = demoPage.Execute(w, map[string]string{"EventTypes": string(types)})
}

func (s *Server) serveDemoJS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(demoJS)
}
