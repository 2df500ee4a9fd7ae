package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckTimeout bounds one probe (a container health check's own
// timeout is usually a few seconds).
const healthcheckTimeout = 3 * time.Second

func (e *env) healthcheckCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "healthcheck [--url URL]",
		Short: "Probe a running serve's GET /healthz on admin.addr; exit 0 when it answers 200",
		Long: `healthcheck asks the serve process of this configuration whether it runs: GET
/healthz on admin.addr (a wildcard host such as 0.0.0.0 is probed on 127.0.0.1),
or on --url. It exits 0 on 200 and 1 otherwise, so a container image without curl
can use it as its health check (the Dockerfile's HEALTHCHECK does).`,
		Example: `  eventpipe healthcheck
  eventpipe healthcheck --url http://127.0.0.1:9090/healthz`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				cfg, err := e.load()
				if err != nil {
					return err
				}
				if cfg.Admin.Addr == "" {
					return usageError{errors.New("admin.addr is empty: the admin server (and /healthz) is off; set it or pass --url")}
				}
				host, port, err := net.SplitHostPort(cfg.Admin.Addr)
				if err != nil {
					return usageError{fmt.Errorf("admin.addr %q: %w", cfg.Admin.Addr, err)}
				}
				if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
					host = "127.0.0.1"
				}
				url = "http://" + net.JoinHostPort(host, port) + "/healthz"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), healthcheckTimeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usageError{fmt.Errorf("healthcheck %s: %w", url, err)}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", url, err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthcheck %s: %s", url, resp.Status)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "healthy: %s\n", url)
			return err
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "probe this URL instead of admin.addr's /healthz")
	return cmd
}
