package realtime_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/eventpipe/eventpipe/handlers/realtime"
)

// The Core server mints a token for a signed-in user; the page opens
// /realtime/sessions/{id}?access_token=… (EventSource) or sends it as
// "Authorization: Bearer …".
func ExampleMintToken() {
	secret := []byte("an example secret of at least 32 bytes")
	tok, err := realtime.MintToken(secret, realtime.Claims{
		UserID:   123,
		Sessions: []int64{99},
		Expires:  time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Unix(),
	})
	if err != nil {
		panic(err)
	}
	v := realtime.HMACVerifier{Secret: secret, Now: func() time.Time { return time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC) }}
	claims, err := v.Verify(tok)
	fmt.Println(err, claims.Allows(realtime.Channel{Kind: realtime.Session, ID: 99}), claims.Allows(realtime.Channel{Kind: realtime.Session, ID: 100}))
	// Output: <nil> true false
}

// One instance: the server is the Sink of handlers/stackup/realtime's route
// (stackup.Deps.Sink) and its Handler is mounted on an HTTP server.
func ExampleNew() {
	srv, err := realtime.New(realtime.Config{
		Verifier: realtime.HMACVerifier{Secret: []byte("an example secret of at least 32 bytes")},
		// Bus: realtime.WatermillBus{…} or pgnotify.New(…) with several
		// instances (decision 0012).
	})
	if err != nil {
		panic(err)
	}
	defer func() { _ = srv.Close() }()
	_ = srv.Sink() // stackup.Deps{Sink: srv.Sink(), …}
	mux := http.NewServeMux()
	mux.Handle("/realtime/", srv.Handler())
	fmt.Println("mounted")
	// Output: mounted
}
