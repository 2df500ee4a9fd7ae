package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is set at build time (-ldflags "-X .../app/cli.Version=v1.2.3").
var Version = "dev"

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			commit, modified := "unknown", false
			if info, ok := debug.ReadBuildInfo(); ok {
				for _, s := range info.Settings {
					switch s.Key {
					case "vcs.revision":
						commit = s.Value
					case "vcs.modified":
						modified = s.Value == "true"
					}
				}
			}
			if modified {
				commit += " (modified)"
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "eventpipe %s\ncommit %s\n%s %s/%s\n",
				Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
